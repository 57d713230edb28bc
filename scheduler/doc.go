// Package scheduler holds herd's placement logic as pure, deterministic
// functions: queue order, filtering with reasons, scoring and selection.
// It does no I/O, reads no clock (time is an argument) and uses no
// randomness that the caller did not seed, so every decision can be
// replayed and explained. The FSM imports it to re-check a reservation
// with the same qualification rules the leader used to make it.
//
// The four stages and where they live:
//   - queue selection (queue.go, order.go): which pending task is next, by
//     priority, aging and fairness between submitters;
//   - filtering (filter.go): hard rules, each failure with a reason code;
//   - scoring (score.go): the reference formula plus the profile composite;
//   - selection (placer.go): the best candidate with a stable tie-break,
//     optionally a seeded weighted choice among the best few.
//
// explain.go turns the filter's reasons into the summaries a waiting task
// carries. The core types (types.go, resources.go) are shared with the FSM.
package scheduler
