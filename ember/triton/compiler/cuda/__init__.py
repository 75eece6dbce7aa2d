"""The GPU's Emitter (the CUDA backend's `tile_emitter`): a tile kernel's program is a CUDA block.

The loop over programs is bound to blockIdx.x (the flattened grid), and `num_warps` warps are the
block's threads. One idea a module, each a layer of the Emitter's class (emitter.py's
CUDAEmitter stacks them):

    threads.py     block statements spread over the block's threads; scalars; barriers
    reduce.py      reductions, arg-reductions and scans, a fold's running value in a register
    registers.py   blocks each thread touches only at its own elements held in registers
    dot.py         tl.dot on the Tensor Cores (wmma fragments over a grid of warps) or CUDA cores
    accumulate.py  a dot's accumulator kept in fragments across a loop
    copies.py      blocks read in; a dot's operands copied 16 bytes a thread at a time, padded
    ldmatrix.py    such dots on mma.sync through ldmatrix from swizzled tiles (EMBER_TILE_MMA=0: wmma)
    epilogue.py    an accumulator in mma's fragments stored by the lanes that hold it, no shared block
    rewrite.py     what the rewrites of the emitted body share
    emitter.py     CUDAEmitter: the kernel's loop over its programs, the rewrites in order
"""

from .emitter import CUDAEmitter

__all__ = ["CUDAEmitter"]
