"""Byte-addressed memory of one thread block: one storage per allocation.

Every allocation (a kernel parameter, an ``AllocBuffer``) is a :class:`Storage`: a flat byte
array. A buffer is a typed *view* (dtype, shape, element offset) of the storage behind its
data pointer, so ``decl_buffer(data=...)`` views, StorageRewrite reuse and dynamic-shared
offsets resolve to the same bytes without special cases. Local storages hold one copy per
thread.

A pointer is an ``int64``: the storage id in the bits above :data:`OFFSET_BITS` and the byte
offset below, so pointer arithmetic, ``address_of`` and ``cvta`` are plain integer
arithmetic on per-thread arrays.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

__all__ = ["OFFSET_BITS", "Memory", "Storage", "np_dtype", "split_pointer"]

#: byte offsets live in the low bits of a pointer; the storage id above them
OFFSET_BITS = 40
_OFFSET_MASK = (1 << OFFSET_BITS) - 1


def np_dtype(dtype: str) -> np.dtype:
    """The NumPy dtype of a TVM scalar dtype string (``"float16"``, ``"bool"``, ``"handle"``)."""
    text = str(dtype)
    if text == "handle":
        return np.dtype("int64")
    if text in ("bfloat16", "float8_e4m3fn", "float8_e5m2"):
        import ml_dtypes

        return np.dtype(getattr(ml_dtypes, text.replace("float8_", "float8_")))
    return np.dtype(text)


def split_pointer(pointer: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(storage id, byte offset)`` arrays of pointer values."""
    pointer = np.asarray(pointer, dtype=np.int64)
    return pointer >> OFFSET_BITS, pointer & _OFFSET_MASK


@dataclass
class Storage:
    """One allocation: its bytes, scope and, for shared memory, which bytes were written.

    Attributes:
        sid: the storage id (the high bits of its pointers).
        name: the buffer that allocated it (for reports).
        scope: ``"global"``, ``"shared"``, ``"shared.dyn"``, ``"local"``...
        nbytes: its size.
        data: ``(nbytes,)`` bytes, or ``(threads, nbytes)`` for per-thread storages.
        written: for shared storages, which bytes any access has initialised.
    """

    sid: int
    name: str
    scope: str
    nbytes: int
    data: np.ndarray
    written: np.ndarray | None = None

    @property
    def per_thread(self) -> bool:
        """Whether every thread has its own copy (local / register storages)."""
        return self.data.ndim == 2

    @property
    def is_shared(self) -> bool:
        """Whether the storage is the block's shared memory (checked for races)."""
        return self.scope.startswith("shared")

    def base(self) -> int:
        """The pointer to byte 0."""
        return self.sid << OFFSET_BITS


@dataclass
class Memory:
    """Every storage of one block run, by id, plus the pointer bookkeeping."""

    threads: int
    storages: dict[int, Storage] = field(default_factory=dict)

    def allocate(self, name: str, scope: str, nbytes: int,
                 init: np.ndarray | None = None) -> Storage:
        """Create a storage of ``nbytes`` bytes; ``init`` (bytes) fills a global one."""
        sid = len(self.storages) + 1
        per_thread = scope in ("local", "local.var", "register", "wmma.accumulator",
                               "wmma.matrix_a", "wmma.matrix_b", "local.fragment")
        shape = (self.threads, nbytes) if per_thread else (nbytes,)
        data = np.zeros(shape, dtype=np.uint8)
        if init is not None:
            data[: len(init)] = init
        written = np.zeros(nbytes, dtype=bool) if scope.startswith("shared") else None
        storage = Storage(sid, name, scope, nbytes, data, written)
        self.storages[sid] = storage
        return storage

    def storage_of(self, sid: int) -> Storage | None:
        """The storage with id ``sid``, or ``None`` for a pointer into nothing."""
        return self.storages.get(int(sid))

    def load(self, storage: Storage, threads: np.ndarray, offsets: np.ndarray,
             dtype: np.dtype) -> np.ndarray:
        """Values of ``dtype`` at byte ``offsets`` (one per thread, or ``(n, lanes)``)."""
        size = dtype.itemsize
        byte_idx = offsets[..., None] + np.arange(size)
        if storage.per_thread:
            rows = np.broadcast_to(threads.reshape(threads.shape + (1,) * (offsets.ndim)),
                                   byte_idx.shape)
            raw = storage.data[rows, byte_idx]
        else:
            raw = storage.data[byte_idx]
        return np.ascontiguousarray(raw).view(dtype).reshape(offsets.shape)

    def store(self, storage: Storage, threads: np.ndarray, offsets: np.ndarray,
              values: np.ndarray, dtype: np.dtype) -> None:
        """Write ``values`` as ``dtype`` at byte ``offsets`` (later threads win on overlap)."""
        size = dtype.itemsize
        # a value too large for a float type becomes inf, as the GPU's conversion makes it
        with np.errstate(over="ignore"):
            raw = np.ascontiguousarray(np.asarray(values).astype(dtype)).reshape(offsets.shape)
        raw = raw.view(np.uint8).reshape((*offsets.shape, size))
        byte_idx = offsets[..., None] + np.arange(size)
        if storage.per_thread:
            rows = np.broadcast_to(threads.reshape(threads.shape + (1,) * (offsets.ndim)),
                                   byte_idx.shape)
            storage.data[rows, byte_idx] = raw
        else:
            storage.data[byte_idx] = raw
            if storage.written is not None:
                storage.written[byte_idx] = True

    def copy_bytes(self, dst: Storage, dst_off: int, src: Storage, src_off: int, nbytes: int,
                   thread: int) -> None:
        """Copy ``nbytes`` from one storage to another (async copies, TMA)."""
        src_bytes = src.data[thread] if src.per_thread else src.data
        chunk = src_bytes[src_off: src_off + nbytes]
        if dst.per_thread:
            dst.data[thread, dst_off: dst_off + len(chunk)] = chunk
        else:
            dst.data[dst_off: dst_off + len(chunk)] = chunk
            if dst.written is not None:
                dst.written[dst_off: dst_off + len(chunk)] = True
