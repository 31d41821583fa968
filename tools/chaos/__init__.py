"""Torture in the open (issue 19): `stamp chaos`, and the history checker it shares with the
probe tests.

- `history`: what a writer was acknowledged (and what stayed in doubt), the records it
  writes, and the client shape the workload speaks (the SDK's, `stampsdk.Client`;
  `AccountView` gives a PartitionClient the same shape);
- `workload`: writers (appends with tokens, puts, ETag CAS, batches), recording every
  acknowledgement and every op's outcome over time, and every op with its real-time bounds
  (history.OpLog); `followers`: readers racing the writers (recorded in the OpLog too),
  subscribers and a scanner;
- `check`: proves after faults that nothing acknowledged was lost, changed, reordered or
  applied twice, that every ETag condition held, that a batch in doubt is all or nothing,
  that subscribers got their logs whole, and that the OpLog is linearizable per log and
  per row (`linearizability`: a Wing-Gong-Lowe search on entity and log models) — as a
  list of violations, never hope;
- `extents`: the same kind of checks one layer down (extent appends, partition-client logs);
- `schedule`: the nemesis's seeded schedule (a pure function of seed, length and shape);
- `nemesis`: applies a schedule's faults to a local stamp (`stamp_faults`: the ones that need
  the stamp's state: split, merge, move, a byte flipped at rest);
- `run`, `report`, `plot`: `stamp chaos` itself;
- `geo` (`stamp chaos --geo`, issue 30): the same workload on a location of two stamps;
  `geo_schedule` its seeded geo faults, `geo_nemesis` applies them (a cut link, a stamp
  killed or power-cut, planned and unplanned failovers, bootstraps), `geo_check` the
  checker's geo rules (losses excused only past the last sync time and in the deposed
  primary's tail, stray tails, both stamps converged).
"""
