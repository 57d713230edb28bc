package cluster

import (
	"herd/api"
)

// Server implements the API's view of a replica.
var _ api.Backend = (*Server)(nil)
