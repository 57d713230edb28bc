package agent

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
)

// registryAuth presents the credentials of a Docker-style config file
// (config.json: its "auths" map, each entry a username and password, an
// "auth" of base64 user:password, or an identity token) to the registries
// it names. The file is read at every pull, so credentials rotated on
// disk are used from the next pull on without a restart. Credential
// helpers ("credsStore", "credHelpers") are not run: the agent starts no
// process but the tasks. A registry the file does not name is asked
// anonymously.
type registryAuth struct {
	path string // empty: every registry is asked anonymously
}

type dockerConfig struct {
	Auths map[string]authn.AuthConfig `json:"auths"`
}

// load reads and checks the file.
func (r registryAuth) load() (map[string]authn.AuthConfig, error) {
	if r.path == "" {
		return nil, nil
	}
	b, err := os.ReadFile(r.path)
	if err != nil {
		return nil, fmt.Errorf("registry credentials: %w", err)
	}
	var cfg dockerConfig
	if err := json.Unmarshal(b, &cfg); err != nil {
		return nil, fmt.Errorf("registry credentials %s: %w", r.path, err)
	}
	auths := make(map[string]authn.AuthConfig, len(cfg.Auths))
	for key, a := range cfg.Auths {
		if a.Username == "" && a.IdentityToken == "" && a.RegistryToken == "" {
			return nil, fmt.Errorf("registry credentials %s: %q has no username, auth or token", r.path, key)
		}
		auths[registryHost(key)] = a
	}
	return auths, nil
}

// registryHost is the host an "auths" key names: keys may be a bare host,
// a URL ("https://host/v1/"), or Docker Hub's historical index address.
func registryHost(key string) string {
	h := key
	if i := strings.Index(h, "://"); i >= 0 {
		h = h[i+3:]
	}
	h, _, _ = strings.Cut(h, "/")
	switch h {
	case "index.docker.io", "registry-1.docker.io", "docker.io":
		return name.DefaultRegistry
	}
	return h
}

// Resolve implements authn.Keychain.
func (r registryAuth) Resolve(res authn.Resource) (authn.Authenticator, error) {
	auths, err := r.load()
	if err != nil {
		return nil, err
	}
	if a, ok := auths[res.RegistryStr()]; ok {
		return authn.FromConfig(a), nil
	}
	return authn.Anonymous, nil
}
