// Package api is herd's HTTP JSON interface as its users see it: the
// wire types every request and answer carries, the limits and headers of
// the contract, and the Go client the CLI, agents and servers use to talk
// to a cluster. Followers forward writes (and ?consistent reads) to the
// leader, so a client may talk to any replica.
//
// The server half (routing, authentication and authorization, the
// handlers and the dashboard) is internal/httpapi, so that an agent or a
// program that only calls the API links none of it.
//
//   - client.go, client_events.go: the client and its event stream;
//   - types.go, job_types.go, acl_types.go, events.go, states.go: the
//     wire types and the states they name (what users declare, the task
//     and job specs with their defaults and rules, is package spec's);
//   - headers.go, limits.go: the headers and limits both halves obey;
//   - gossip.go: what agents and servers put in gossip metadata and
//     messages.
package api
