package main

import (
	"os"
	"strings"
	"testing"

	"herd/config"
)

// docs/configuration.md lists every setting of the server and of the
// agent, as the settings tables declare them (a setting added, renamed or
// changed without the page fails here, printing the table it must hold).
func TestConfigurationPageListsEverySetting(t *testing.T) {
	b, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	for name, ref := range map[string]string{"server": config.ServerSettings.Reference(), "agent": agentTable.Reference()} {
		if !strings.Contains(readme, ref) {
			t.Errorf("docs/configuration.md lacks the %s settings as declared; it must hold:\n%s", name, ref)
		}
	}
}
