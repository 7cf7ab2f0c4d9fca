"""Where independent jobs run: here, one after another, or on a Dask cluster.

Why: a paper-scale sweep is about 10^15 FLOP, hours on one CPU machine, and users will
want to spread it (and the notebooks) over several. Jobs are module-level functions of
picklable arguments that return small results (per-layer metrics, an executed
notebook); the caller writes every result itself, atomically, so a worker needs the
`collapse` package but no shared folder for sweeps. Notebook runs need the checkout at
the same path on every worker (book/scale.md).

An executor has `name`, `workers` (how many jobs run at once, for ETAs), `remote`
(whether arguments leave this process) and `map(fn, items)`, which runs fn(*args) for
every args tuple in `items` and yields (index, result) as jobs finish, in any order.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

import numpy as np
import torch

from ..checks import ParameterError, check_choice, check_int

__all__ = ["EXECUTORS", "LocalExecutor", "DaskExecutor", "make"]

EXECUTORS = ("local", "dask")
_SCATTER_BYTES = 1 << 20  # arrays above this go to the workers once, ahead of the task graph


class LocalExecutor:
    """Every job in this process, in order: the reference the others must match."""

    name, workers, remote = "local", 1, False

    def map(self, fn: Callable, items: Iterable[tuple]) -> Iterator[tuple[int, object]]:
        for index, args in enumerate(items):
            yield index, fn(*args)

    def close(self) -> None:
        """Nothing to release."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class DaskExecutor:
    """Jobs on a Dask cluster: a LocalCluster of `workers` processes, or the scheduler at
    `scheduler`.

    A LocalCluster gives each worker one thread (Dask also sets OMP/MKL threads to 1 in
    its worker processes), so `workers` jobs run side by side; `scheduler` connects to a
    running cluster (`dask scheduler` + `dask worker`, or dask-jobqueue) instead.
    """

    name, remote = "dask", True

    def __init__(self, scheduler: str | None = None, workers: int = 2):
        try:
            from distributed import Client, LocalCluster
        except ImportError:
            raise ParameterError(
                "executor 'dask' needs dask.distributed: pip install 'rank-collapse[dask]'"
            ) from None
        self._cluster = None
        if scheduler:
            try:
                self.client = Client(scheduler, timeout="20s")
            except OSError as err:
                raise ParameterError(f"scheduler {scheduler!r} cannot be reached: {err}") from None
        else:
            workers = check_int("workers", workers, minimum=1)
            self._cluster = LocalCluster(
                n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=":0"
            )
            self.client = Client(self._cluster)
        self.workers = max(1, sum(self.client.nthreads().values()))

    def _ship(self, value):
        big = isinstance(value, (np.ndarray, torch.Tensor)) and value.nbytes > _SCATTER_BYTES
        return self.client.scatter(value, hash=False) if big else value

    def map(self, fn: Callable, items: Iterable[tuple]) -> Iterator[tuple[int, object]]:
        from distributed import as_completed

        futures = {
            self.client.submit(fn, *map(self._ship, args), pure=False): index
            for index, args in enumerate(items)
        }
        try:
            for future in as_completed(futures):
                yield futures[future], future.result()
        finally:  # interrupted or failed: nothing keeps running for a result nobody reads
            self.client.cancel(list(futures))

    def close(self) -> None:
        self.client.close()
        if self._cluster is not None:
            self._cluster.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def make(kind: str = "local", *, scheduler: str | None = None, workers: int | None = None):
    """The executor the command line asks for: --executor local|dask, --scheduler
    ADDRESS, --workers N.
    """
    kind = check_choice("executor", kind, EXECUTORS)
    if kind == "local":
        if scheduler or workers is not None:
            raise ParameterError("--scheduler and --workers need --executor dask")
        return LocalExecutor()
    if scheduler and workers is not None:
        raise ParameterError(
            "--workers sets the size of a LocalCluster; with --scheduler the cluster has its own"
        )
    return DaskExecutor(scheduler, 2 if workers is None else workers)
