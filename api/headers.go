package api

// Headers describing how fresh a read is, and the loop guard for forwarding.
const (
	HeaderIndex       = "X-Herd-Index"
	HeaderLastContact = "X-Herd-Last-Contact"
	HeaderKnownLeader = "X-Herd-Known-Leader"
	HeaderForwarded   = "X-Herd-Forwarded-By"
	// HeaderForwardedFor, on a forwarded request, is the address the
	// original caller connected from (believed from a server only).
	HeaderForwardedFor = "X-Herd-Forwarded-For"
	// HeaderLeaderAddress, on an answer a follower forwarded, is the
	// leader's HTTP address: a client that knows it sends its next writes
	// there directly, sparing the follower and a hop.
	HeaderLeaderAddress = "X-Herd-Leader-Address"
	// HeaderVersion is the build of the client that sent a request (the
	// Go client sends it); HeaderForwardedVersion, on a forwarded
	// request, the build of the replica that forwarded it. A server told
	// that a newer build sent a field it does not know answers as a
	// server in the middle of an upgrade, not as one given bad input.
	HeaderVersion          = "X-Herd-Version"
	HeaderForwardedVersion = "X-Herd-Forwarded-Version"
)
