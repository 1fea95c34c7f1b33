"""Giving back the part of a thread's stack it no longer uses, before it waits long (Linux on x86-64 with glibc;
elsewhere a no-op).

A worker holds a thread per run in flight (AGENTOS_MAX_CONCURRENCY), and a run spends seconds waiting on its
model. A stack page stays resident once touched, and the deep calls before the wait (the claim, the journal's
writes: Django's ORM and psycopg2) touch about 35 KB of each thread's stack: some 90 MB of a worker holding 3,000
runs. `release_unused_stack` tells the kernel (madvise MADV_DONTNEED) that the pages of the calling thread's
stack below where it runs now, less `MARGIN`, may go; they come back as zero pages if the thread goes that deep
again, as a fresh stack's would.
"""

from __future__ import annotations

import ctypes
import os
import platform
import sys
import threading

MARGIN = 8 * 1024  # below the calling frame, kept: what the calls made from here use (ctypes, madvise: < 2 KB)
_MADV_DONTNEED = 4
_RSP_OFFSET = 160  # ucontext_t.uc_mcontext.gregs[REG_RSP] on x86-64 glibc: 40 + 15 * 8
_PAGE = os.sysconf("SC_PAGESIZE") if hasattr(os, "sysconf") else 4096


class _Attributes(ctypes.Structure):
    _fields_ = [("opaque", ctypes.c_char * 64)]  # pthread_attr_t: 56 bytes on x86-64


def _libc():
    if sys.platform != "linux" or platform.machine() != "x86_64" or platform.libc_ver()[0] != "glibc":
        return None
    libc = ctypes.CDLL(None, use_errno=True)
    libc.pthread_self.restype = ctypes.c_ulong
    libc.pthread_getattr_np.argtypes = [ctypes.c_ulong, ctypes.POINTER(_Attributes)]
    libc.pthread_attr_getstack.argtypes = [
        ctypes.POINTER(_Attributes),
        ctypes.POINTER(ctypes.c_void_p),
        ctypes.POINTER(ctypes.c_size_t),
    ]
    libc.pthread_attr_destroy.argtypes = [ctypes.POINTER(_Attributes)]
    libc.getcontext.argtypes = [ctypes.c_char_p]
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    return libc


_LIBC = _libc()


def release_unused_stack() -> int:
    """Let the kernel take back the calling thread's stack pages below its current depth (less `MARGIN`); the
    bytes of the range given back (resident or not), 0 where nothing was (the main thread, whose stack grows on
    demand, or another platform)."""
    if _LIBC is None or threading.current_thread() is threading.main_thread():
        return 0
    attributes = _Attributes()
    if _LIBC.pthread_getattr_np(_LIBC.pthread_self(), ctypes.byref(attributes)) != 0:
        return 0
    low, size = ctypes.c_void_p(), ctypes.c_size_t()
    _LIBC.pthread_attr_getstack(ctypes.byref(attributes), ctypes.byref(low), ctypes.byref(size))
    _LIBC.pthread_attr_destroy(ctypes.byref(attributes))
    context = ctypes.create_string_buffer(1024)  # a ucontext_t (936 bytes), for the stack pointer
    if low.value is None or _LIBC.getcontext(context) != 0:
        return 0
    pointer = int.from_bytes(context.raw[_RSP_OFFSET : _RSP_OFFSET + 8], "little")
    start = (low.value + 2 * _PAGE - 1) // _PAGE * _PAGE  # a page above the lowest, as glibc's guard may be
    end = (pointer - MARGIN) // _PAGE * _PAGE
    if not low.value < pointer <= low.value + size.value or end <= start:
        return 0
    return end - start if _LIBC.madvise(start, end - start, _MADV_DONTNEED) == 0 else 0
