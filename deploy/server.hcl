# An example configuration of one of three replicas (s1 at 10.1.0.11),
# secured: TLS on every link, ACLs, encrypted gossip (the key in
# /etc/herd/server.env as HERD_GOSSIP_KEY). Every setting is listed in
# the README under "Configuration".
id               = "s1"
data_dir         = "/var/lib/herd"
http_addr        = "0.0.0.0:4646"
raft_addr        = "0.0.0.0:4647"
gossip_addr      = "0.0.0.0:4648"
http_advertise   = "10.1.0.11:4646"
raft_advertise   = "10.1.0.11:4647"
gossip_advertise = "10.1.0.11:4648"
bootstrap_expect = 3
join             = ["10.1.0.11:4646", "10.1.0.12:4646", "10.1.0.13:4646"]
log_level        = "info"
memory_limit_mib = 512

tls_ca_file   = "/etc/herd/tls/ca.pem"
tls_cert_file = "/etc/herd/tls/s1.pem"
tls_key_file  = "/etc/herd/tls/s1-key.pem"
acl           = true

scheduler {
  heartbeat_ttl  = "30s"
  task_retention = "24h"
}

liveness {
  heartbeat_interval     = "5s"
  max_heartbeat_interval = "15s"
}

profiles {
  l1_min_cores     = 4
  l1_min_memory_mb = 8192
}
