//go:build !linux

package bench

// benchElections needs Linux network namespaces.
func benchElections(_, _ string, _ benchSizes, r *Result) error {
	r.ElectionsSkipped = "the elections step needs Linux network namespaces"
	return nil
}
