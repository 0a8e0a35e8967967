package provisioning

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"unicode/utf8"
)

// Format is the bootstrap data format, the `format` key of a Cluster API
// bootstrap Secret.
type Format string

const (
	// FormatCloudConfig is cloud-init's cloud-config. An empty Format means
	// the same, as it does in Cluster API.
	FormatCloudConfig Format = "cloud-config"
	// FormatIgnition is an Ignition config (JSON, spec 2.x or 3.x).
	FormatIgnition Format = "ignition"
)

// SentinelPath is the file the bootstrap data writes once kubeadm has
// succeeded (CABPK appends the write to its kubeadm command). Plan does not
// add it; the executor checks for it after running the steps.
const SentinelPath = "/run/cluster-api/bootstrap-success.complete"

// DefaultFileMode is the mode of a written file whose data names none, as in
// cloud-init and Ignition.
const DefaultFileMode os.FileMode = 0o644

var (
	// ErrUnknownFormat means the format is neither cloud-config nor
	// ignition.
	ErrUnknownFormat = errors.New("unknown bootstrap data format")

	// ErrMalformed means the bootstrap data cannot be turned into steps:
	// it is empty, not valid YAML/JSON, or a field has a bad or unsupported
	// value. The wrapping message names the format and the field, e.g.
	// `malformed cloud-config: write_files[2]: unknown encoding "b65"`.
	ErrMalformed = errors.New("malformed")

	// ErrMissingHostname means the data refers to the instance's hostname
	// (a cloud-init jinja variable) but Vars.Hostname is empty.
	ErrMissingHostname = errors.New("bootstrap data needs a hostname but none was given")

	// ErrMissingAddress means the data refers to the instance's IPv4
	// address (a cloud-init jinja variable) but Vars.LocalIPv4 is empty.
	ErrMissingAddress = errors.New("bootstrap data needs an IPv4 address but none was given")

	// ErrTooLarge means the data, or what it decodes to, is larger than
	// MaxDataSize or MaxPlanSize.
	ErrTooLarge = errors.New("bootstrap data too large")
)

// Bounds on one machine's bootstrap data. The data comes from a Secret that
// whoever creates the Machine controls, and the plan stays in the manager's
// memory while it runs; kubeadm's data is a few tens of KiB.
const (
	// MaxDataSize bounds the data as given (a Secret holds at most 1 MiB).
	MaxDataSize = 2 << 20
	// MaxPlanSize bounds what the data decodes to: the contents of every
	// file and the text of every command, gzip and base64 undone.
	MaxPlanSize = 16 << 20
)

// Vars are the values substituted into the bootstrap data.
type Vars struct {
	// Hostname is the node container's name. It replaces
	// {{ ds.meta_data.hostname }}, {{ ds.meta_data.local_hostname }} and
	// {{ v1.local_hostname }} (with or without the spaces).
	Hostname string
	// LocalIPv4 is the node container's IPv4 address on the cluster's
	// network, which other nodes reach it at even where its default route
	// leaves through another interface (an overlay's docker_gwbridge). It
	// replaces {{ ds.meta_data.local_ipv4 }} (with or without the spaces).
	LocalIPv4 string
}

// File is a file to write inside the node container.
type File struct {
	// Path is absolute and clean. The executor creates missing parent
	// directories.
	Path string
	// Content is the decoded content, with the jinja variables of Vars
	// substituted.
	Content []byte
	// Mode holds the permission bits (and setuid/setgid/sticky as
	// os.ModeSetuid etc.). The executor applies it even when appending.
	Mode os.FileMode
	// Owner is "user:group" (or "user"), names or numeric ids, as written in
	// the data; "" means root:root. The executor chowns the file when it is
	// neither "" nor "root:root".
	Owner string
	// Append adds Content to the end of the file instead of replacing it
	// (creating the file if needed).
	Append bool
}

// Step is one thing to do inside the node container. Exactly one of File and
// Command is set.
type Step struct {
	// Description is short and human readable, e.g.
	// `write /etc/kubernetes/pki/ca.crt` or `run kubeadm init --config ...`.
	Description string
	File        *File
	// Command is an argv, run without a shell; shell strings from the data
	// become []string{"/bin/sh", "-c", script}.
	Command []string
}

// Result is the outcome of Analyze.
type Result struct {
	// Steps are to be run in order.
	Steps []Step
	// Ignored names the parts of the data that were understood to be there
	// but are not acted on, sorted, e.g. "ntp", "users" (cloud-config) or
	// "passwd", "storage.filesystems" (Ignition). Callers may log them.
	Ignored []string
}

// Plan turns bootstrap data into the steps to run in a node container. It is
// Analyze without the list of ignored parts.
func Plan(format Format, data []byte, vars Vars) ([]Step, error) {
	r, err := Analyze(format, data, vars)
	if err != nil {
		return nil, err
	}
	return r.Steps, nil
}

// Analyze turns bootstrap data into the steps to run in a node container and
// also reports what it ignored.
func Analyze(format Format, data []byte, vars Vars) (Result, error) {
	var (
		r   Result
		err error
	)
	if len(data) > MaxDataSize {
		return Result{}, fmt.Errorf("%w: %d bytes, more than %d", ErrTooLarge, len(data), MaxDataSize)
	}
	switch format {
	case FormatCloudConfig, "":
		r, err = planCloudConfig(data)
		if err != nil {
			return Result{}, fmt.Errorf("%w cloud-config: %w", ErrMalformed, err)
		}
	case FormatIgnition:
		r, err = planIgnition(data)
		if err != nil {
			return Result{}, fmt.Errorf("%w ignition: %w", ErrMalformed, err)
		}
	default:
		return Result{}, fmt.Errorf("%w %q (want %q or %q)", ErrUnknownFormat, string(format), FormatCloudConfig, FormatIgnition)
	}
	if err := substitute(r.Steps, vars); err != nil {
		return Result{}, err
	}
	if n := planSize(r.Steps); n > MaxPlanSize {
		return Result{}, fmt.Errorf("%w: it decodes to %d bytes, more than %d", ErrTooLarge, n, MaxPlanSize)
	}
	for i := range r.Steps {
		r.Steps[i].Description = describe(r.Steps[i])
	}
	return r, nil
}

// maxDescription is the longest Step.Description, in runes.
const maxDescription = 80

func describe(s Step) string {
	var d string
	switch {
	case s.File != nil && s.File.Append:
		d = "append to " + s.File.Path
	case s.File != nil:
		d = "write " + s.File.Path
	case isShellC(s.Command):
		d = "run " + s.Command[2]
	default:
		d = "run " + strings.Join(s.Command, " ")
	}
	cut := false
	if i := strings.IndexByte(d, '\n'); i >= 0 {
		d, cut = strings.TrimRight(d[:i], " \t\r"), true
	}
	if utf8.RuneCountInString(d) > maxDescription {
		d, cut = string([]rune(d)[:maxDescription-4]), true
	}
	if cut {
		d += " ..."
	}
	return d
}

// isShellC reports whether argv is exactly what a shell-string item becomes.
func isShellC(argv []string) bool {
	return len(argv) == 3 && argv[0] == "/bin/sh" && argv[1] == "-c"
}

// planSize is what steps hold: file contents and command text.
func planSize(steps []Step) int {
	n := 0
	for _, s := range steps {
		if s.File != nil {
			n += len(s.File.Content)
		}
		for _, arg := range s.Command {
			n += len(arg)
		}
	}
	return n
}

// decodedBudget stops decoding as soon as the files decoded so far exceed
// MaxPlanSize, so that many small gzip bombs cannot add up in memory before
// Analyze checks the total.
type decodedBudget int

func (b *decodedBudget) spend(content []byte) error {
	*b += decodedBudget(len(content))
	if *b > MaxPlanSize {
		return fmt.Errorf("%w: its files decode to more than %d bytes", ErrTooLarge, MaxPlanSize)
	}
	return nil
}
