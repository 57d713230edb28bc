# One replica of a secure three-server cluster, the configuration-file form
# of the `herd server` flags in docs/security.md (a test holds the two
# alike): s1 on 10.0.0.11, with s2 and s3 on .12 and .13 by the same file
# with their id, addresses and certificate. The gossip key is a secret and
# stays out of the file: give it in the environment,
#
#   HERD_GOSSIP_KEY="$KEY" herd server -config /etc/herd/server.hcl
id               = "s1"
data_dir         = "/var/lib/herd"
http_addr        = "10.0.0.11:4646"
raft_addr        = "10.0.0.11:4647"
gossip_addr      = "10.0.0.11:4648"
bootstrap_expect = 3
join             = ["10.0.0.11:4646", "10.0.0.12:4646", "10.0.0.13:4646"]

# HTTPS for the API; mutual TLS between server certificates for Raft,
# forwarding and joins (herd tls cert create -server -id s1).
tls_ca_file   = "/etc/herd/ca.pem"
tls_cert_file = "/etc/herd/s1.pem"
tls_key_file  = "/etc/herd/s1-key.pem"

# Every request needs a token; bootstrap once with herd acl bootstrap.
acl = true
