package fsm

func applyUpsertServer(db *store, index uint64, r *UpsertServerRequest) (any, error) {
	if r.Server.ID == "" {
		return nil, reject(RejectInvalid, "server id is required")
	}
	s := r.Server
	s.ModifyIndex = index
	db.putServer(&s)
	return &s, nil
}

func applyRemoveServer(db *store, r *RemoveServerRequest) (any, error) {
	if v, ok := db.server(r.ID); ok {
		db.deleteServer(v)
	}
	return nil, nil // removing a server already gone is a no-op
}
