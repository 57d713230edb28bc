package cluster

import (
	"herd/internal/httpapi"
)

// Server implements the API's view of a replica.
var _ httpapi.Backend = (*Server)(nil)
