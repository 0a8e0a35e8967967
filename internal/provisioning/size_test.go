package provisioning

import (
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// TestSizeBounds: bootstrap data, and what it decodes to, are bounded, and
// decoding stops at the file that crosses the bound rather than after
// holding them all.
func TestSizeBounds(t *testing.T) {
	mib := base64.StdEncoding.EncodeToString(gz(t, strings.Repeat("\x00", 1<<20)))
	cloudConfig := func(files int) string {
		var b strings.Builder
		b.WriteString("#cloud-config\nwrite_files:\n")
		for i := range files {
			fmt.Fprintf(&b, "- {path: /f%d, encoding: gz+b64, content: %s}\n", i, mib)
		}
		return b.String()
	}
	ignition := func(files int) string {
		var parts []string
		for i := range files {
			parts = append(parts, fmt.Sprintf(`{"path":"/f%d","contents":{"source":"data:;base64,%s","compression":"gzip"}}`, i, mib))
		}
		return `{"ignition":{"version":"3.4.0"},"storage":{"files":[` + strings.Join(parts, ",") + `]}}`
	}
	testCases := []struct {
		name   string
		format Format
		data   string
		want   string // "" for accepted
	}{
		{name: "data over MaxDataSize", format: FormatCloudConfig, data: "#cloud-config\n#" + strings.Repeat("x", MaxDataSize), want: "more than 2097152"},
		{name: "cloud-config decoding to 16 MiB", format: FormatCloudConfig, data: cloudConfig(16)},
		{name: "cloud-config decoding to 17 MiB", format: FormatCloudConfig, data: cloudConfig(40), want: "write_files[16]: bootstrap data too large"},
		{name: "ignition decoding to 16 MiB", format: FormatIgnition, data: ignition(16)},
		{name: "ignition decoding to 17 MiB", format: FormatIgnition, data: ignition(40), want: "storage.files[16]: bootstrap data too large"},
	}
	for _, tc := range testCases {
		t.Run(tc.name, func(t *testing.T) {
			if len(tc.data) > MaxDataSize+100 {
				t.Fatalf("the input itself is %d bytes", len(tc.data))
			}
			steps, err := Plan(tc.format, []byte(tc.data), Vars{})
			if tc.want == "" {
				if err != nil || planSize(steps) != 16<<20 {
					t.Fatalf("want 16 MiB of steps, got %d bytes and %v", planSize(steps), err)
				}
				return
			}
			if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("want ErrTooLarge containing %q, got %v", tc.want, err)
			}
		})
	}
}
