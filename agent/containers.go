package agent

import (
	"fmt"
	"maps"
	"path/filepath"
	"slices"

	"herd/api"
)

// setUpContainers finds the node's OCI runtime and opens the image cache.
// A node with a working runtime advertises the capability oci@1; without
// one, oci tasks are never placed here and their explanation says so.
func (a *Agent) setUpContainers() error {
	cache, err := newImageCache(filepath.Join(a.cfg.DataDir, "images"), a.cfg.ImageCacheMB<<20, a.cfg.InsecureRegistries, a.cfg.RegistryAuthFile)
	if err != nil {
		return err
	}
	a.images = cache
	a.oci, a.ociProblem = findRuntime(a.cfg.OCIRuntime, a.cfg.DataDir)
	if a.oci != nil {
		a.leftoverContainers = a.oci.removeLeftovers(filepath.Join(a.cfg.DataDir, "oci", "bundles"))
		for id := range a.leftoverContainers {
			a.logger.Warn("removed a container an earlier run of the agent left", "attempt", id)
		}
	}
	caps := maps.Clone(a.cfg.Capabilities)
	if a.oci != nil {
		a.logger.Info("containers", "runtime", a.oci.name, "capability", "oci@1")
		if !slices.Contains(caps["oci"], "1") {
			caps["oci"] = append(slices.Clone(caps["oci"]), "1")
		}
	} else {
		a.logger.Info("containers unavailable", "reason", a.ociProblem)
		if vs := slices.DeleteFunc(slices.Clone(caps["oci"]), func(v string) bool { return v == "1" }); len(vs) > 0 {
			caps["oci"] = vs
		} else {
			delete(caps, "oci")
		}
	}
	a.cfg.Capabilities = caps
	return nil
}

// ContainerRuntime is the OCI runtime this agent runs oci tasks with
// ("runc 1.1.5"), or "" and why there is none.
func (a *Agent) ContainerRuntime() (string, string) {
	if a.oci == nil {
		return "", a.ociProblem
	}
	return a.oci.name, ""
}

// imageStatus is the agent's answer about its runtime and image cache.
func (a *Agent) imageStatus() api.ImageCache {
	used, maxBytes, pulls, hits, failures, images := a.images.status()
	rt, problem := a.ContainerRuntime()
	if images == nil {
		images = []api.CachedImage{}
	}
	return api.ImageCache{Runtime: rt, RuntimeProblem: problem, UsedBytes: used, MaxBytes: maxBytes,
		Pulls: pulls, Hits: hits, Failures: failures, Images: images}
}

func pullFailure(err error) string { return fmt.Sprintf("image: %v", err) }
