package api

import (
	"bytes"
	"testing"

	"github.com/hashicorp/go-msgpack/v2/codec"
)

// Metadata written by a newer build, with fields this one does not know,
// decodes to what this build knows of it.
func TestGossipMetaFromANewerBuild(t *testing.T) {
	newer := struct {
		GossipMeta
		Zone    string `codec:"zz"`
		Battery int    `codec:"bb"`
	}{GossipMeta: GossipMeta{Role: RoleAgent, ID: "edge-1", FreeSlots: 2, Version: "99.0.0"}, Zone: "b", Battery: 40}
	var buf bytes.Buffer
	if err := codec.NewEncoder(&buf, &codec.MsgpackHandle{}).Encode(newer); err != nil {
		t.Fatal(err)
	}
	m, err := DecodeGossipMeta(buf.Bytes())
	if err != nil || m != newer.GossipMeta {
		t.Fatalf("decoded %+v (%v), want %+v", m, err, newer.GossipMeta)
	}
}
