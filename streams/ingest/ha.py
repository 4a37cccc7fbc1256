"""HA Prometheus pairs: one replica's samples per cluster, the way Cortex / Mimir's HA tracker does.

Two replicas scrape the same targets and send the same series, differing only
in a replica label; taking both doubles every sum. Per HA cluster the tracker
elects the first replica it hears from and drops the others' samples; when the
elected replica has sent nothing for ``failover_ms`` and another replica sends
a newer sample, that one is elected (Cortex: 30 s by default, for a 15-s
scrape interval). Time is event time -- sample timestamps -- as everywhere in
the frame builder, which has no clock.
"""

from __future__ import annotations

__all__ = ["HaTracker"]


class HaTracker:
    def __init__(self, failover_ms: int) -> None:
        if failover_ms <= 0:
            raise ValueError("failover_ms must be > 0")
        self.failover_ms = failover_ms
        self._elected: dict[str, list] = {}  # cluster -> [replica, newest sample ts]
        self.failovers = 0

    def accepts(self, cluster: str, replica: str, ts: int) -> bool:
        """True if a sample at ``ts`` from ``replica`` of ``cluster`` is to be kept."""
        elected = self._elected.get(cluster)
        if elected is None:
            self._elected[cluster] = [replica, ts]
            return True
        if elected[0] == replica:
            if ts > elected[1]:
                elected[1] = ts
            return True
        if ts - elected[1] > self.failover_ms:
            elected[0], elected[1] = replica, ts
            self.failovers += 1
            return True
        return False

    def elected(self, cluster: str) -> str | None:
        entry = self._elected.get(cluster)
        return None if entry is None else entry[0]

    def forget_before(self, cutoff_ts: int) -> None:
        """Forget clusters not heard from since ``cutoff_ts`` (bounded state)."""
        for cluster in [c for c, (_, ts) in self._elected.items() if ts < cutoff_ts]:
            del self._elected[cluster]
