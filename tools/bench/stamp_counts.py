"""What a stamp's servers did during a bench phase, from their Prometheus metrics
(common/metrics.py): how many Call messages the partition servers read and wrote, and how
many journal group commits (each one fdatasync) and records the extent nodes made. Per
request, these say where a path's cost per request comes from: requests per message (how
well the caller batches), records per group commit (how well the partition server's commit
blocks and the extent nodes' journals batch). Issue 32 asks why requests through a front end
cost the rest of the stamp more than direct ones (`stamp bench fe-append`).

Contract: `StampCounts.now(stamp)` scrapes every process of the stamp that serves metrics (a
process that does not answer counts 0: the figures of a phase it missed are short, never
made up); `per_request` divides the difference of two snapshots by a phase's requests.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from tools.local_stamp import LocalStamp
from tools.scrape import Samples, scrape_many


@dataclass
class StampCounts:
    ps_messages_in: float = 0.0
    ps_messages_out: float = 0.0
    en_group_commits: float = 0.0  # journal fdatasyncs, all extent nodes
    en_records: float = 0.0  # records journaled, all extent nodes (each replica counts)

    @classmethod
    async def now(cls, stamp: LocalStamp) -> StampCounts:
        addresses = [r.metrics_address for r in (*stamp.partition_servers(),
                                                 *stamp.extent_nodes())]
        scraped = await scrape_many(addresses)
        counts = cls()
        for samples in scraped.values():
            if samples is not None:
                counts._add(samples)
        return counts

    def _add(self, samples: Samples) -> None:
        self.ps_messages_in += samples.value("stamp_ps_call_messages_total", direction="in")
        self.ps_messages_out += samples.value("stamp_ps_call_messages_total", direction="out")
        self.en_group_commits += samples.value("stamp_journal_group_commit_records_count")
        self.en_records += samples.value("stamp_journal_group_commit_records_sum")

    def add(self, after: StampCounts, before: StampCounts) -> None:
        """Add the counts of a phase: `after` less `before`."""
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(after, f.name)
                    - getattr(before, f.name))

    def per_request(self, requests: int) -> dict[str, float]:
        n = max(1, requests)
        return {"ps_messages_in_per_request": round(self.ps_messages_in / n, 3),
                "ps_messages_out_per_request": round(self.ps_messages_out / n, 3),
                "en_group_commits_per_request": round(self.en_group_commits / n, 3),
                "en_records_per_group_commit": round(
                    self.en_records / max(1.0, self.en_group_commits), 2)}
