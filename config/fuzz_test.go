package config

import "testing"

// FuzzParseServer: arbitrary config files never panic; errors are errors.
func FuzzParseServer(f *testing.F) {
	for _, s := range []string{
		"id = \"s1\"\ndata_dir = \"/d\"\n", "raft {\n heartbeat_timeout = \"1s\"\n}\n", "scheduler {\n batch_size = 5\n}\n",
		"liveness {\n down_after = 5\n}\n", "join = [\"a:1\"]\n", "id = ", "}}}", "gossip_key = \"!!\"\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, src []byte) {
		c := DefaultServer()
		if err := ParseServer(&c, "fuzz.hcl", src); err != nil {
			return
		}
		_ = c.Validate()
	})
}
