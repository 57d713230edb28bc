package main

import (
	"os"
	"strings"
	"testing"

	"herd/config"
)

// The README's configuration reference lists every setting of the server
// and of the agent, as the settings tables declare them (a setting added,
// renamed or changed without the README fails here, printing the table
// the README must hold).
func TestREADMEListsEverySetting(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	for name, ref := range map[string]string{"server": config.ServerSettings.Reference(), "agent": agentTable.Reference()} {
		if !strings.Contains(readme, ref) {
			t.Errorf("README.md lacks the %s settings as declared; it must hold:\n%s", name, ref)
		}
	}
}
