"""The stage API of the field's teaching material (`s = te.create_schedule(C.op)`,
`s[C].split(i, factor=32)`, `s[B].compute_at(s[C], xo)`), as a thin facade over the loop-IR
schedule: a stage is a block, an axis is a loop, and every directive is a traced primitive.

Axes are either the compute's own iteration variables (`s[C].op.axis[0]`, resolved to the loop
bound to them right now) or the loop handles that split/fuse/tile returned.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..errors import ScheduleError
from ..tir.expr import Buffer
from ..tir.functor import free_vars
from ..tir.params import bind_params
from ..tir.schedule import LoopRV, Schedule
from ..tir.schedule.nest import exclusive_top
from ..tir.stmt import THREAD_TAGS, For, IterVar, PrimFunc
from ..tir.tensor_intrin import TensorIntrin
from .tensor import ComputeOp, ExternOp, Operation, PlaceholderOp, Tensor, input_tensors_of
from .to_tir import create_prim_func


class ThreadAxis:
    """A GPU block or thread index (`te.thread_axis("threadIdx.x")`), what Stage.bind takes."""

    def __init__(self, tag: str):
        if tag not in THREAD_TAGS:
            raise ScheduleError(f"unknown thread index {tag!r}; the indices are {THREAD_TAGS}")
        self.tag = tag

    def __repr__(self):
        return f"thread_axis({self.tag!r})"


class StageOp:
    """What `s[T].op` shows of a stage: its iteration variables, as in te."""

    def __init__(self, name: str, axis: tuple[IterVar, ...], reduce_axis: tuple[IterVar, ...]):
        self.name, self.axis, self.reduce_axis = name, axis, reduce_axis


class Stage:
    def __init__(self, sched: TESchedule, block_name: str):
        self.sched = sched
        self.block = sched.sch.get_block(block_name)

    @property
    def sch(self) -> Schedule:
        return self.sched.sch

    @property
    def name(self) -> str:
        return self.sch.block_name(self.block)

    @property
    def op(self) -> StageOp:
        blk = self.sch.get_realize(self.block).block
        return StageOp(blk.name, tuple(iv for iv in blk.iter_vars if iv.kind == "spatial"),
                       tuple(iv for iv in blk.iter_vars if iv.kind == "reduce"))

    def _loop(self, axis) -> LoopRV:
        """The loop handle for an axis of this stage."""
        realize = self.sch.get_realize(self.block)
        loops = self.sch.loops_of(self.block)
        if isinstance(axis, LoopRV):
            var = self.sch.loop_var(axis)
            if not any(f.loop_var is var for f in loops):
                self.sch.get_for(axis)  # a consumed loop says so
                raise ScheduleError(f"axis {var.name} is not a loop of stage {self.name!r}")
            return axis
        if isinstance(axis, IterVar):
            axis = self.sched.axis_alias.get((self.name, axis.var), axis)
            # the loop of this stage's own nest (not shared with a consumer it was computed at)
            # that the iteration variable is bound to
            own = self._own_loops()
            for iv, val in zip(realize.block.iter_vars, realize.iter_values):
                if iv is axis or iv.var is axis.var:
                    mine = free_vars(val) & own
                    if len(mine) == 1:
                        (var,) = mine
                        handles = self.sch.get_loops(self.block)
                        return next(h for h in handles if self.sch.loop_var(h) is var)
                    raise ScheduleError(
                        f"axis {axis.var.name} of stage {self.name!r} was already split or fused; "
                        "use the axes that split/fuse returned"
                    )
            raise ScheduleError(f"axis {axis.var.name} is not an axis of stage {self.name!r}")
        raise ScheduleError(f"expected an axis of stage {self.name!r}, got {axis!r}")

    def _own_loops(self) -> set:
        """This stage's loops: those below the loop it was computed at (all, if at the root)."""
        path = self.sch.block_path(self.block)
        fors = [f for f in path if isinstance(f, For)]
        attach = self.sched.attach.get(self.name)
        at = next((k for k, f in enumerate(fors) if f.loop_var is attach), None)
        if attach is None:
            return {f.loop_var for f in fors}
        if at is None:  # the attachment loop was split since: fall back to the block's own nest
            return {f.loop_var for f in path[path.index(exclusive_top(path)):] if isinstance(f, For)}
        return {f.loop_var for f in fors[at + 1:]}

    # -- loop directives -------------------------------------------------------------------
    def split(self, parent, factor: int | None = None, nparts: int | None = None):
        if (factor is None) == (nparts is None):
            raise ScheduleError("split takes exactly one of factor= and nparts=")
        factors = [None, factor] if factor is not None else [nparts, None]
        outer, inner = self.sch.split(self._loop(parent), factors=factors)
        return outer, inner

    def tile(self, *args):
        """tile(x, y, fx, fy) -> (xo, yo, xi, yi); tile(x, y, k, fx, fy, fk) -> (xo, yo, ko, xi, yi,
        ki): each axis split by its factor, the outer loops before the inner ones (k may be a
        reduction axis: a GEMM's three-axis tile)."""
        if len(args) not in (4, 6):
            raise ScheduleError(f"tile takes two axes and two factors, or three and three; got {len(args)} arguments")
        n = len(args) // 2
        parts = [self.split(axis, factor=f) for axis, f in zip(args[:n], args[n:])]
        order = [o for o, _ in parts] + [i for _, i in parts]
        self.reorder(*order)
        return tuple(order)

    def fuse(self, *axes):
        return self.sch.fuse(*[self._loop(a) for a in axes])

    def reorder(self, *axes):
        self.sch.reorder(*[self._loop(a) for a in axes])

    def parallel(self, axis):
        self.sch.parallel(self._loop(axis))

    def vectorize(self, axis):
        self.sch.vectorize(self._loop(axis))

    def unroll(self, axis):
        self.sch.unroll(self._loop(axis))

    def bind(self, axis, thread_axis: ThreadAxis):
        """s[C].bind(bx, te.thread_axis("blockIdx.x")): run the axis on GPU blocks or threads."""
        if not isinstance(thread_axis, ThreadAxis):
            raise ScheduleError(f"bind takes a te.thread_axis, got {type(thread_axis).__name__}")
        self.sch.bind(self._loop(axis), thread=thread_axis.tag)

    def storage_align(self, axis, factor: int, offset: int):
        """s[AS].storage_align(AS.op.axis[0], 32, 1): pad the stage's buffer so that the stride of
        `axis` (its rows) is `offset` modulo `factor` elements (ember.tir.schedule.storage_align)."""
        axes = list(self.op.axis)
        index = next((k for k, iv in enumerate(axes) if iv is axis or getattr(axis, "var", None) is iv.var), None)
        if index is None:
            raise ScheduleError(f"storage_align takes an axis of stage {self.name!r}'s buffer, got {axis!r}")
        self.sch.storage_align(self.block, buffer_index=0, axis=index, factor=factor, offset=offset)

    def tensorize(self, axis, intrin):
        """Map the loops from `axis` inward onto a tensor intrinsic (te.decl_tensor_intrin's, or its name)."""
        self.sch.tensorize(self._loop(axis), intrin=intrin.name if isinstance(intrin, TensorIntrin) else intrin)

    def pragma(self, axis, key: str, value=True):
        """pragma(axis, "auto_unroll_max_step", 16): the unroll limit annotation."""
        self.sch.annotate(self._loop(axis), key if key.startswith("pragma_") else f"pragma_{key}", value)

    # -- compute location ------------------------------------------------------------------
    def compute_at(self, parent: Stage, axis):
        loop = parent._loop(axis)
        self.sch.compute_at(self.block, loop)
        self.sched.attach[self.name] = self.sch.loop_var(loop)

    def reverse_compute_at(self, parent: Stage, axis):
        loop = parent._loop(axis)
        self.sch.reverse_compute_at(self.block, loop)
        self.sched.attach[self.name] = self.sch.loop_var(loop)

    def compute_inline(self):
        self.sch.compute_inline(self.block)

    def reverse_compute_inline(self):
        self.sch.reverse_compute_inline(self.block)

    def compute_root(self):
        self.sch.compute_root(self.block)
        self.sched.attach.pop(self.name, None)

    def decompose_reduction(self, axis) -> Stage:
        rv = self.sch.decompose_reduction(self.block, self._loop(axis))
        return self.sched.stage_named(self.sch.block_name(rv))


class TESchedule:
    """`te.create_schedule(ops)`: a loop-IR schedule of the function computing `ops`."""

    def __init__(self, ops: Sequence[Operation]):
        outputs = [t for op in ops for t in op.outputs]
        for op in ops:
            if not isinstance(op, ComputeOp | ExternOp):
                raise ScheduleError(f"create_schedule takes compute or extern ops, got {type(op).__name__}")
        placeholders = [op.output(0) for op in input_tensors_of(outputs) if isinstance(op, PlaceholderOp)]
        _unique_names([op for op in input_tensors_of(outputs) if isinstance(op, ComputeOp | ExternOp)])
        self.sch = Schedule(create_prim_func(placeholders + outputs))
        self._block_of: dict[Buffer, str] = {}
        self._stages: dict[str, Stage] = {}
        # (block name, te axis variable) -> that block's iteration variable: after cache_write the
        # compute's original axes name the copy stage's axes, as in te
        self.axis_alias: dict[tuple[str, object], IterVar] = {}
        self.attach: dict[str, object] = {}  # block name -> the loop variable it was computed at
        for op in input_tensors_of(outputs):
            if isinstance(op, ComputeOp | ExternOp):
                for t in op.outputs:
                    self._block_of[t.buffer] = op.name

    @classmethod
    def over(cls, sch: Schedule) -> TESchedule:
        """The stage API over an existing loop-IR schedule (its blocks the stages, each found by
        the buffers it writes), so that schedules written in te apply to it: the tuner's GPU
        sketches (ember.tune.gpu_space) run them on the schedule the search samples."""
        self = cls.__new__(cls)
        self.sch = sch
        self._block_of = {w.buffer: r.block.name for r in sch.all_realizes() if r.block.name != "root"
                          for w in r.block.writes}
        self._stages, self.axis_alias, self.attach = {}, {}, {}
        return self

    def computed(self, t) -> bool:
        """Whether a block still computes tensor t (False once it was inlined into its readers)."""
        name = self._block_of.get(_buffer_of(t))
        return name is not None and any(r.block.name == name for r in self.sch.all_realizes())

    def __getitem__(self, t) -> Stage:
        buf = _buffer_of(t)
        name = self._block_of.get(buf)
        if name is None:
            raise ScheduleError(f"{getattr(t, 'name', t)!r} is not a computed tensor of this schedule")
        return self.stage_named(name)

    def stage_named(self, name: str) -> Stage:
        if name not in self._stages:
            self._stages[name] = Stage(self, name)
        return self._stages[name]

    @property
    def trace(self):
        return self.sch.trace

    def cache_write(self, tensor: Tensor, scope) -> Tensor:
        """Compute `tensor` into a `scope` buffer; s[result] is that compute, s[tensor] the copy out.
        `scope`: a name ("local", "shared", ...) or an accelerator's memory (ember.accel: its `scope`)."""
        scope = _scope_name(scope)
        stage = self[tensor]
        blk = self.sch.get_realize(stage.block).block
        index = next((k for k, w in enumerate(blk.writes) if w.buffer is tensor.buffer), 0)
        copy = self.sch.cache_write(stage.block, write_buffer_index=index, storage_scope=scope)
        cache_buf = self.sch.get_realize(stage.block).block.writes[index].buffer
        copy_name = self.sch.block_name(copy)
        self._block_of[tensor.buffer] = copy_name
        self._block_of[cache_buf] = blk.name
        copy_ivs = self.sch.get_realize(copy).block.iter_vars
        spatial = [iv for iv in blk.iter_vars if iv.kind == "spatial"]
        self.axis_alias.update({(copy_name, iv.var): civ for iv, civ in zip(spatial, copy_ivs)})
        return Tensor(tensor.op, 0, cache_buf)

    def cache_read(self, tensor: Tensor, scope, readers: Sequence) -> Tensor:
        """Copy `tensor` into a `scope` buffer (as cache_write's) that the reader stages read instead."""
        scope = _scope_name(scope)
        stages = [self[r] for r in readers]
        if not stages:
            raise ScheduleError("cache_read needs at least one reader")
        blk = self.sch.get_realize(stages[0].block).block
        index = next((k for k, rd in enumerate(blk.reads) if rd.buffer is tensor.buffer), None)
        if index is None:
            raise ScheduleError(f"cache_read: stage {stages[0].name!r} does not read {tensor.name}")
        copy = self.sch.cache_read(stages[0].block, read_buffer_index=index, storage_scope=scope,
                                   consumer_blocks=[st.block for st in stages[1:]] or None)
        cache_buf = self.sch.get_realize(copy).block.writes[0].buffer
        self._block_of[cache_buf] = self.sch.block_name(copy)
        return Tensor(tensor.op, 0, cache_buf)

    def pad_einsum(self, tensor: Tensor, padding: Sequence[int]) -> dict[Buffer, Tensor]:
        """Pad the product computing `tensor` to multiples of `padding` (one per axis, reduction
        axes last) with zeros (ember.tir.schedule.padding). Returns the padded tensors by the
        buffer each stands for (its inputs', and its own when an output axis grew): s[padded]
        is the compute of the padded product, s[tensor] then the copy of its part out."""
        stage = self[tensor]
        wanted = {f"{b.name}_pad": b for b in (*self._reads(stage), tensor.buffer)}
        self.sch.pad_einsum(stage.block, padding=list(padding))
        made = {}
        for r in self.sch.all_realizes():
            for w in r.block.writes:
                if w.buffer.name in wanted:
                    self._block_of[w.buffer] = r.block.name
                    made[wanted[w.buffer.name]] = Tensor(tensor.op, 0, w.buffer)
        if tensor.buffer in made:
            self._block_of[tensor.buffer] = f"{tensor.buffer.name}_unpad"
        return made

    def _reads(self, stage) -> list[Buffer]:
        return [r.buffer for r in self.sch.get_realize(stage.block).block.reads]

    def rfactor(self, tensor: Tensor, axis, factor_axis: int = 0) -> Tensor:
        stage = self[tensor]
        rf = self.sch.rfactor(stage._loop(axis), factor_axis=factor_axis)
        rf_buf = self.sch.get_realize(rf).block.writes[0].buffer
        self._block_of[rf_buf] = self.sch.block_name(rf)
        return Tensor(tensor.op, 0, rf_buf)

    def to_prim_func(self, args: Sequence[Tensor], name: str = "main") -> PrimFunc:
        """The scheduled function with parameters `args`, in that order."""
        return bind_params(self.sch.mod, [_buffer_of(a) for a in args], name)


def _unique_names(ops: Sequence[Operation]) -> None:
    """Rename the computes whose name an earlier one has (each operator of a fused kernel names
    its output "out"): a stage is its block, and a block is found by its name."""
    seen: set[str] = set()
    for op in ops:
        name, k = op.name, 1
        while name in seen:
            name, k = f"{op.name}_{k}", k + 1
        op.name = name
        seen.add(name)


def _scope_name(scope) -> str:
    name = getattr(scope, "scope", scope)
    if not isinstance(name, str):
        raise ScheduleError(f"a storage scope is a name or an accelerator's memory, got {type(scope).__name__}")
    return name


def _buffer_of(t) -> Buffer:
    if isinstance(t, Tensor):
        return t.buffer
    if isinstance(t, Operation):
        return t.output(0).buffer
    if isinstance(t, Buffer):
        return t
    raise ScheduleError(f"expected a tensor, got {type(t).__name__}")
