// Package api is herd's HTTP JSON interface, both ends of it: the wire
// types, the Go client the CLI and agents use, and the handlers every
// replica serves. Followers forward writes (and ?consistent reads) to the
// leader, so a client may talk to any replica.
//
// The handlers stay in this package rather than a server package of
// their own: they and the client are two halves of one contract (the
// types, the limits such as MaxBatchTasks, and the mapping of errors to
// statuses and codes that the client's retries read back), and keeping
// them together lets one change and its tests cover both halves. The
// server side is nonetheless separate in its files and in what it needs:
//   - handler.go: the Handler, its routing (local, leader-only, readable
//     routes) and the one adapter every endpoint goes through;
//   - handler_<family>.go: each endpoint family with the role interface
//     it consumes (StatusBackend, OperatorBackend, TaskBackend,
//     NodeBackend, AttemptBackend); Backend is their union;
//   - forward.go: forwarding to the leader; respond.go: decoding bodies,
//     writing answers and errors.
//
// The client is client.go and gossip.go; the wire types are types.go.
package api
