// Package httpapi is the server half of herd's HTTP API (the wire types
// and the client are package api): every replica serves it.
//
//   - handler.go: the Handler, its routing (local, leader-only and
//     readable routes) and the one adapter every endpoint goes through;
//     Backend is the union of the role interfaces below;
//   - handler_<family>.go: each endpoint family with the role interface
//     it consumes from a replica (StatusBackend, OperatorBackend,
//     TaskBackend, NodeBackend, ProfileBackend, JobBackend,
//     AttemptBackend, EventBackend; ACLBackend in acl.go);
//   - acl.go, scope.go: who the caller is, what each route needs (every
//     route declares its capability), and what a scoped token may read;
//   - forward.go: forwarding to the leader; respond.go: decoding bodies,
//     writing answers and errors;
//   - handler_ui.go: the dashboard's files (internal/ui) at /ui/.
package httpapi
