package provisioning

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path"
	"sort"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"
)

// maxDecoded bounds the size of one decompressed file, so that a small gzip
// bomb in the data cannot exhaust the controller's memory.
const maxDecoded = MaxPlanSize

// planCloudConfig turns a cloud-config into steps: bootcmd, write_files
// (deferred ones last) and runcmd, cloud-init's order.
func planCloudConfig(data []byte) (Result, error) {
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) == 0 {
		return Result{}, errors.New("empty")
	}
	if bytes.HasPrefix(trimmed, []byte("#!")) {
		return Result{}, errors.New("data is a script, not a cloud-config (only cloud-config is supported)")
	}
	if bytes.HasPrefix(trimmed, []byte("Content-Type:")) || bytes.HasPrefix(trimmed, []byte("MIME-Version:")) {
		return Result{}, errors.New("data is MIME multi-part, not a cloud-config (only cloud-config is supported)")
	}
	// The headers ("## template: jinja", "#cloud-config") are YAML comments,
	// so data with and without them parses the same.
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		return Result{}, fmt.Errorf("invalid YAML: %w", err)
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(js, &top); err != nil || top == nil {
		if bytes.Equal(bytes.TrimSpace(js), []byte("null")) {
			return Result{}, errors.New("empty (no modules)")
		}
		return Result{}, errors.New("top level is not a mapping of modules")
	}

	var r Result
	for name := range top {
		switch name {
		case "bootcmd", "write_files", "runcmd":
		default:
			r.Ignored = append(r.Ignored, name)
		}
	}
	sort.Strings(r.Ignored)

	if raw, ok := top["bootcmd"]; ok {
		cmds, err := parseCommands("bootcmd", raw)
		if err != nil {
			return Result{}, err
		}
		r.Steps = append(r.Steps, cmds...)
	}
	if raw, ok := top["write_files"]; ok {
		files, err := parseWriteFiles(raw)
		if err != nil {
			return Result{}, err
		}
		r.Steps = append(r.Steps, files...)
	}
	if raw, ok := top["runcmd"]; ok {
		cmds, err := parseCommands("runcmd", raw)
		if err != nil {
			return Result{}, err
		}
		for i := range cmds {
			cmds[i].Command = adaptKubeadmArgv(cmds[i].Command)
		}
		r.Steps = append(r.Steps, cmds...)
	}
	return r, nil
}

// isNull reports whether a raw JSON value is null (or absent).
func isNull(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	return len(t) == 0 || bytes.Equal(t, []byte("null"))
}

// parseCommands parses bootcmd or runcmd: a list whose items are a string
// (run by /bin/sh -c) or a list of scalars (an argv).
func parseCommands(module string, raw json.RawMessage) ([]Step, error) {
	if isNull(raw) {
		return nil, nil
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, fmt.Errorf("%s: not a list", module)
	}
	steps := make([]Step, 0, len(items))
	for i, item := range items {
		var s string
		if err := json.Unmarshal(item, &s); err == nil {
			if strings.TrimSpace(s) == "" {
				return nil, fmt.Errorf("%s[%d]: empty command", module, i)
			}
			steps = append(steps, Step{Command: []string{"/bin/sh", "-c", s}})
			continue
		}
		var list []json.RawMessage
		if err := json.Unmarshal(item, &list); err != nil {
			return nil, fmt.Errorf("%s[%d]: not a string or a list of strings", module, i)
		}
		if len(list) == 0 {
			return nil, fmt.Errorf("%s[%d]: empty command", module, i)
		}
		argv := make([]string, len(list))
		for j, a := range list {
			v, err := scalarString(a)
			if err != nil {
				return nil, fmt.Errorf("%s[%d][%d]: %w", module, i, j, err)
			}
			argv[j] = v
		}
		if argv[0] == "" {
			return nil, fmt.Errorf("%s[%d]: empty command name", module, i)
		}
		steps = append(steps, Step{Command: argv})
	}
	return steps, nil
}

// scalarString returns a JSON string, number or boolean as cloud-init would
// write it into a command line (it str()s list items).
func scalarString(raw json.RawMessage) (string, error) {
	var v any
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	if err := d.Decode(&v); err != nil {
		return "", fmt.Errorf("invalid value")
	}
	switch v := v.(type) {
	case string:
		return v, nil
	case json.Number:
		return v.String(), nil
	case bool:
		if v {
			return "True", nil // Python's str(True), as cloud-init does.
		}
		return "False", nil
	}
	return "", fmt.Errorf("not a string")
}

type writeFile struct {
	Path        *string         `json:"path"`
	Content     json.RawMessage `json:"content"`
	Encoding    json.RawMessage `json:"encoding"`
	Owner       json.RawMessage `json:"owner"`
	Permissions json.RawMessage `json:"permissions"`
	Append      json.RawMessage `json:"append"`
	Defer       json.RawMessage `json:"defer"`
	Source      json.RawMessage `json:"source"`
}

// parseWriteFiles parses write_files; files with defer: true come after the
// others, as cloud-init writes them in a later stage (still before runcmd).
func parseWriteFiles(raw json.RawMessage) ([]Step, error) {
	if isNull(raw) {
		return nil, nil
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, errors.New("write_files: not a list")
	}
	var now, deferred []Step
	var budget decodedBudget
	for i, item := range items {
		f, isDeferred, err := parseWriteFile(item)
		if err != nil {
			return nil, fmt.Errorf("write_files[%d]: %w", i, err)
		}
		if err := budget.spend(f.Content); err != nil {
			return nil, fmt.Errorf("write_files[%d]: %w", i, err)
		}
		if isDeferred {
			deferred = append(deferred, Step{File: f})
		} else {
			now = append(now, Step{File: f})
		}
	}
	return append(now, deferred...), nil
}

func parseWriteFile(item json.RawMessage) (*File, bool, error) {
	var wf writeFile
	if err := json.Unmarshal(item, &wf); err != nil {
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) && typeErr.Field != "" {
			return nil, false, fmt.Errorf("%s: wrong type", typeErr.Field)
		}
		return nil, false, errors.New("not a mapping")
	}
	if wf.Path == nil {
		return nil, false, errors.New("no path")
	}
	p, err := cleanPath(*wf.Path)
	if err != nil {
		return nil, false, err
	}
	if !isNull(wf.Source) {
		return nil, false, fmt.Errorf("%s: source (fetching content from a URI) is not supported", p)
	}
	content, err := optString(wf.Content, "content")
	if err != nil {
		return nil, false, fmt.Errorf("%s: %w", p, err)
	}
	enc, err := optString(wf.Encoding, "encoding")
	if err != nil {
		return nil, false, fmt.Errorf("%s: %w", p, err)
	}
	decoded, err := decodeContent(content, enc)
	if err != nil {
		return nil, false, fmt.Errorf("%s: %w", p, err)
	}
	owner, err := optString(wf.Owner, "owner")
	if err != nil {
		return nil, false, fmt.Errorf("%s: %w", p, err)
	}
	mode, err := parsePermissions(wf.Permissions)
	if err != nil {
		return nil, false, fmt.Errorf("%s: %w", p, err)
	}
	appendMode, err := optBool(wf.Append, "append")
	if err != nil {
		return nil, false, fmt.Errorf("%s: %w", p, err)
	}
	isDeferred, err := optBool(wf.Defer, "defer")
	if err != nil {
		return nil, false, fmt.Errorf("%s: %w", p, err)
	}
	return &File{
		Path:    p,
		Content: decoded,
		Mode:    mode,
		Owner:   strings.TrimSpace(owner),
		Append:  appendMode,
	}, isDeferred, nil
}

// cleanPath checks that p is an absolute path and cleans it.
func cleanPath(p string) (string, error) {
	p = strings.TrimSpace(p)
	if p == "" {
		return "", errors.New("empty path")
	}
	if !strings.HasPrefix(p, "/") {
		return "", fmt.Errorf("path %q is not absolute", p)
	}
	if strings.ContainsRune(p, 0) {
		return "", fmt.Errorf("path %q contains a NUL byte", p)
	}
	p = path.Clean(p)
	if p == "/" {
		return "", errors.New(`path "/" is a directory`)
	}
	return p, nil
}

// optString returns a string field, "" when absent or null.
func optString(raw json.RawMessage, field string) (string, error) {
	if isNull(raw) {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", fmt.Errorf("%s is not a string", field)
	}
	return s, nil
}

// optBool returns a boolean field, false when absent or null; like
// cloud-init it also accepts the strings true/false/yes/no/on/off/1/0.
func optBool(raw json.RawMessage, field string) (bool, error) {
	if isNull(raw) {
		return false, nil
	}
	var b bool
	if err := json.Unmarshal(raw, &b); err == nil {
		return b, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		switch strings.ToLower(strings.TrimSpace(s)) {
		case "true", "yes", "on", "1":
			return true, nil
		case "false", "no", "off", "0", "":
			return false, nil
		}
	}
	return false, fmt.Errorf("%s is not a boolean: %s", field, truncate(string(raw), 40))
}

// parsePermissions parses write_files' permissions: an octal string ("0640",
// "640", "0o640") or a number (YAML 1.1 reads an unquoted 0640 as octal, so
// the number is the mode itself). Absent means DefaultFileMode.
func parsePermissions(raw json.RawMessage) (os.FileMode, error) {
	if isNull(raw) {
		return DefaultFileMode, nil
	}
	var n json.Number
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return 0, errors.New("invalid permissions")
	}
	switch v := v.(type) {
	case json.Number:
		n = v
		i, err := strconv.ParseInt(n.String(), 10, 64)
		if err != nil {
			f, ferr := n.Float64()
			if ferr != nil || f != math.Trunc(f) || f < 0 || f > 0o7777 {
				return 0, fmt.Errorf("permissions %s is not a mode", n)
			}
			i = int64(f)
		}
		return unixMode(i, n.String())
	case string:
		s := strings.TrimSpace(v)
		if s == "" {
			return DefaultFileMode, nil
		}
		digits := strings.TrimPrefix(strings.TrimPrefix(s, "0o"), "0O")
		i, err := strconv.ParseInt(digits, 8, 64)
		if err != nil {
			return 0, fmt.Errorf("permissions %q is not an octal mode", v)
		}
		return unixMode(i, strconv.Quote(v))
	}
	return 0, fmt.Errorf("permissions %s is not a string or a number", truncate(string(raw), 40))
}

// modeSpecial are the os.FileMode bits unixMode may set besides 0777.
const modeSpecial = os.ModeSetuid | os.ModeSetgid | os.ModeSticky

// unixMode converts Unix permission bits (up to 07777) to an os.FileMode.
func unixMode(i int64, shown string) (os.FileMode, error) {
	if i < 0 || i > 0o7777 {
		return 0, fmt.Errorf("permissions %s out of range (0 to 07777)", shown)
	}
	m := os.FileMode(i & 0o777)
	if i&0o4000 != 0 {
		m |= os.ModeSetuid
	}
	if i&0o2000 != 0 {
		m |= os.ModeSetgid
	}
	if i&0o1000 != 0 {
		m |= os.ModeSticky
	}
	return m, nil
}

// decodeContent decodes write_files content by its encoding, as cloud-init
// does (names are case-insensitive).
func decodeContent(content, encoding string) ([]byte, error) {
	switch strings.ToLower(strings.TrimSpace(encoding)) {
	case "", "text", "text/plain":
		return []byte(content), nil
	case "b64", "base64":
		return decodeBase64(content)
	case "gz", "gzip":
		return gunzip([]byte(content))
	case "gz+b64", "gz+base64", "gzip+b64", "gzip+base64":
		b, err := decodeBase64(content)
		if err != nil {
			return nil, err
		}
		return gunzip(b)
	}
	return nil, fmt.Errorf("unknown encoding %q", encoding)
}

// decodeBase64 decodes standard base64, ignoring whitespace (YAML block
// scalars wrap long lines) and accepting missing padding.
func decodeBase64(s string) ([]byte, error) {
	s = strings.Map(func(r rune) rune {
		switch r {
		case ' ', '\t', '\n', '\r':
			return -1
		}
		return r
	}, s)
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		if b2, err2 := base64.RawStdEncoding.DecodeString(strings.TrimRight(s, "=")); err2 == nil {
			return b2, nil
		}
		return nil, fmt.Errorf("bad base64: %w", err)
	}
	return b, nil
}

func gunzip(b []byte) ([]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("bad gzip: %w", err)
	}
	out, err := io.ReadAll(io.LimitReader(zr, maxDecoded+1))
	if err != nil {
		return nil, fmt.Errorf("bad gzip: %w", err)
	}
	if len(out) > maxDecoded {
		return nil, fmt.Errorf("gzip content larger than %d bytes", maxDecoded)
	}
	return out, nil
}

// truncate shortens s to at most n runes for an error message.
func truncate(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n]) + "..."
}
