"""Every message that crosses a process boundary: the protocol on one page.

Messages carry ids and slot indices only; observations, actions and the rest stay in the shared
trajectory tensors (appo/protocol/buffers.py). Records are NamedTuples because they pickle fast and small, and
faster-fifo pickles each message that travels.

Who sends what to whom (the queues themselves are created by appo.protocol.wiring.wire):

    actor worker  --InferenceRequest-->  policy queue of `policy_id` (any of its policy workers)
    policy worker --ActionsReady------>  inbox of actor worker `worker_idx`
    actor worker  --TrajectoryReady--->  learner queue of `policy_id`  (slot ownership moves to the learner)
    learner       --SlotsReleased----->  inbox of actor worker `worker_idx` (ownership moves back)
    actor worker  --EpisodeReport----->  driver queue
    learner       --TrainReport------->  driver queue
    driver        --ReturnSummary----->  learner queue (for the best checkpoint)
    driver        --SetHyperparams---->  learner queue (PBT: mutated hyperparameters)
    driver        --CopyPolicy-------->  learner queue of the source (PBT replacement, step 1) ...
    learner       --LoadPolicy-------->  ... which snapshots itself and tells the target's learner (step 2)
    learner       --HyperparamsReport->  driver queue (at start: the hyperparameters a checkpoint restored)
    learner rank 0 --ShardReady------->  inbox of learner rank r > 0 of its policy (--learner_world_size)
    driver        --EvalRequest------->  evaluator queue
    evaluator     --EvalReport-------->  driver queue
    any child     --ErrorReport------->  driver queue, then exits non-zero
    driver        --Stop-------------->  every inbox and queue
    MAML driver   --HvpRequest-------->  inbox of hvp worker `worker_idx` (its tasks' KL Hessian-vector products)
    hvp worker    --HvpReady---------->  MAML driver queue
"""

from __future__ import annotations

from typing import NamedTuple


class InferenceRequest(NamedTuple):
    """Split `split_idx` of actor worker `worker_idx` waits for actions for its envs, whose current
    observations sit at time index `t` of slots first_slot .. first_slot + num_envs - 1; or, when `envs`
    is given (several policies share the split), of slots first_slot + e for e in envs."""

    policy_id: int
    worker_idx: int
    split_idx: int
    first_slot: int
    num_envs: int
    t: int
    incarnation: int = 0  # which start of this actor worker asked (a restarted worker ignores old replies)
    envs: tuple[int, ...] | None = None  # this policy's envs within the split; None: all of them


class ActionsReady(NamedTuple):
    """Actions (and log-probs, values, next rnn states) for that split are written into its slots. Echoes
    the request's position and incarnation, so a stale or duplicate reply is recognised and dropped."""

    worker_idx: int
    split_idx: int
    first_slot: int = 0
    t: int = 0
    incarnation: int = 0
    policy_id: int = 0


class TrajectoryReady(NamedTuple):
    """A slot group is full: `num_envs` trajectories of `rollout` steps of this policy, in consecutive slots
    from `first_slot`, or in slots first_slot + e for e in `envs` when the group's envs ran several policies."""

    policy_id: int
    worker_idx: int
    split_idx: int
    group_idx: int
    first_slot: int
    num_envs: int
    envs: tuple[int, ...] | None = None
    incarnation: int = 0  # of the actor worker that filled the group: its SlotsReleased echoes it


class SlotsReleased(NamedTuple):
    """The learner of `policy_id` has copied (async) or trained on (sync) its part of this slot group; the
    actor refills the group once every policy's learner has released it. Echoes the incarnation that handed
    the group over: a restarted actor worker reads its predecessor's inbox and must not take a release meant
    for a hand-over of the predecessor's as one of its own."""

    worker_idx: int
    split_idx: int
    group_idx: int
    policy_id: int = 0
    incarnation: int = 0


class EpisodeReport(NamedTuple):
    """Episodes that ended since the last report of this worker (returns and lengths, per policy). For
    task envs an episode is a trial; `trials` then holds each trial's per-episode returns and its task's bucket
    label ({"returns": [...], "bucket": str}: appo/sampling/actor_worker.py trial_summary), a few bytes a trial."""

    policy_id: int
    worker_idx: int
    returns: list[float]
    lengths: list[int]
    trials: list[dict] = []
    busy: float = -1.0  # share of the worker's wall time spent stepping envs since its last report
    pool_returns: list[float] = []  # of `returns`, those of games against a self-play snapshot (multi-agent)
    objectives: list[float] = []  # the true objectives of those episodes whose env reported one (info[TRUE_OBJECTIVE])
    agent_returns: dict[str, list[float]] = {}  # multi-agent: `returns` again, by the name of the agent that played


class TrainReport(NamedTuple):
    """Learner progress: counters are totals since the run began (they survive resume)."""

    policy_id: int
    env_steps: int
    version: int
    stats: dict[str, float]


class EvalRequest(NamedTuple):
    """Evaluate the newest weights of `policy_id` (at `env_steps`) with deterministic actions."""

    policy_id: int
    env_steps: int


class EvalReport(NamedTuple):
    """Evaluation result: plain envs fill return/length statistics; task envs also the mean return by
    episode index within a trial over the held-out tasks (the adaptation curve), each task's return and the
    adaptation gain."""

    policy_id: int
    env_steps: int
    version: int
    return_mean: float
    return_std: float
    length_mean: float
    returns_by_episode: list[float]
    task_returns: list[float]
    stochastic_returns_by_episode: list[float] = []  # task envs: the same trials with sampled actions
    # Task envs: how much a trial's last episode beats its first, mean over the held-out tasks and its standard
    # error (paired by task): deterministic, then with sampled actions. Only a policy that remembers gains.
    adaptation_gain: tuple[float, float] = (0.0, 0.0)
    stochastic_adaptation_gain: tuple[float, float] = (0.0, 0.0)
    true_objective_mean: float | None = None  # plain envs whose episodes report a true objective (a duel's frags)


class ReturnSummary(NamedTuple):
    """The driver's current average episode return of this policy, for the learner's best checkpoint."""

    policy_id: int
    return_mean: float


class SetHyperparams(NamedTuple):
    """PBT: train policy `policy_id` with these hyperparameters from its next iteration on."""

    policy_id: int
    hparams: dict[str, float]


class CopyPolicy(NamedTuple):
    """PBT, to the learner of the better policy `policy_id`: snapshot yourself (weights, optimizer, normalisers)
    and have the learner of `target` load the snapshot with `hparams`."""

    policy_id: int
    target: int
    hparams: dict[str, float]


class LoadPolicy(NamedTuple):
    """PBT, to the learner of `policy_id`: replace your weights, optimizer state and normalisers with the
    snapshot at `path` (taken from policy `source`) and train with `hparams` from now on."""

    policy_id: int
    source: int
    path: str
    hparams: dict[str, float]


class HyperparamsReport(NamedTuple):
    """A learner's hyperparameters as it starts (restored from its checkpoint on resume)."""

    policy_id: int
    hparams: dict[str, float]


class ShardReady(NamedTuple):
    """To learner rank `rank` of `policy_id`, from its rank 0: copy the trajectories in `slots` (your shard of
    batch number `batch_idx`, which counted `env_steps` env steps), then mark the batch copied
    (appo/learning/distributed.py RankLink.copied); rank 0 releases the slot groups after every rank has."""

    policy_id: int
    rank: int
    batch_idx: int
    slots: tuple[int, ...]
    env_steps: int
    seconds: float = -1.0  # of the session when rank 0 took the batch: the schedules' clock on every rank


class ErrorReport(NamedTuple):
    component: str
    error: str


class Stop(NamedTuple):
    """Finish what you are doing, flush and save, and exit."""

    reason: str = ""


class HvpRequest(NamedTuple):
    """MAML: compute J_k F_k J_k v (appo/maml/algorithm.py MamlTrpo.task_hvps) for each task row in `rows`
    of the
    meta-batch of `iteration` (episode buffers 0 and 1, meta-parameters in weight set 0) with v = the shared
    hvp vector; write it into the hvp output's row."""

    iteration: int
    seq: int
    rows: tuple[int, ...]


class HvpReady(NamedTuple):
    """MAML: hvp worker `worker_idx` has written its rows' products of request `seq`."""

    worker_idx: int
    seq: int
