"""MAML-TRPO (--algo=maml_trpo) in one package: a meta-gradient method owns its run loop, its samplers and its
helper processes, so they live together rather than in the engine's layers (its flags stay with the other
algorithms' flags, for parsing).

    algorithm.py   the math: policy parameters as dicts, advantages, the inner adaptation (`inner_step`, the one
                   torch adaptation rule; `adapt`, `MamlTrpo.adapted`), the outer loss, the KL's Hessian-vector
                   products and `MamlTrpo.step`, the TRPO meta-step. No processes, no queues.
    buffers.py     the meta-iteration's episodes in shared memory (`EpisodeBuffers`), episode horizon and seeds.
    hvp_pool.py    `HvpPool`: helper processes computing the tasks' KL Hessian-vector products.
    actors.py      `ActorPool`: the tasks' episodes on the engine's actor workers (or in-process, --serial_mode).
    ray_actors.py  `RayActorPool`: the same on Ray actors (--backend=ray).
    driver.py      `run`: synchronous meta-iterations, summaries, checkpoints and resume, the meta-test (the driver
                   hands it runs whose traits consume meta_batches).
    enjoy.py       `enjoy_maml`: enjoy.py on a MAML run, before and after one adaptation (appo/tools/evaluate.py
                   hands it MAML runs).
"""
