package provisioning

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"sort"
	"strconv"
	"strings"
)

// kubeadmScriptPath is where CABPK's Ignition output puts the script that
// runs kubeadm (started by its kubeadm.service unit).
const kubeadmScriptPath = "/etc/kubeadm.sh"

// systemdUnitDir is where Ignition writes systemd units.
const systemdUnitDir = "/etc/systemd/system"

type ignResource struct {
	Source      *string `json:"source"`
	Compression *string `json:"compression"`
}

type ignNode struct {
	ID   *int64 `json:"id"`
	Name string `json:"name"`
}

type ignFile struct {
	Path     *string         `json:"path"`
	Contents *ignResource    `json:"contents"`
	Append   json.RawMessage `json:"append"` // 2.x: bool; 3.x: list of resources
	Mode     *int64          `json:"mode"`
	User     *ignNode        `json:"user"`
	Group    *ignNode        `json:"group"`
}

type ignDropin struct {
	Name     string  `json:"name"`
	Contents *string `json:"contents"`
}

type ignUnit struct {
	Name     string      `json:"name"`
	Contents *string     `json:"contents"`
	Enabled  *bool       `json:"enabled"`
	Enable   bool        `json:"enable"` // 2.x, deprecated form of enabled
	Mask     bool        `json:"mask"`
	Dropins  []ignDropin `json:"dropins"`
}

// planIgnition turns an Ignition config (spec 2.x or 3.x) into steps: the
// files, then the systemd units and dropins, `systemctl daemon-reload`, and
// `systemctl enable --now` for each enabled unit.
func planIgnition(data []byte) (Result, error) {
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) == 0 {
		return Result{}, errors.New("empty")
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(trimmed, &top); err != nil || top == nil {
		return Result{}, errors.New("not a JSON object")
	}
	var r Result
	meta, v2, err := ignitionVersion(top)
	if err != nil {
		return Result{}, err
	}

	storage, err := section(top, "storage")
	if err != nil {
		return Result{}, err
	}
	systemd, err := section(top, "systemd")
	if err != nil {
		return Result{}, err
	}
	r.Ignored = append(r.Ignored, ignoredKeys("", top, "ignition", "storage", "systemd")...)
	r.Ignored = append(r.Ignored, ignoredKeys("ignition.", meta, "version")...)
	r.Ignored = append(r.Ignored, ignoredKeys("storage.", storage, "files")...)
	r.Ignored = append(r.Ignored, ignoredKeys("systemd.", systemd, "units")...)

	steps, err := ignitionFiles(storage["files"], v2)
	if err != nil {
		return Result{}, err
	}
	r.Steps = append(r.Steps, steps...)
	steps, ignored, err := ignitionUnits(systemd["units"], v2)
	if err != nil {
		return Result{}, err
	}
	r.Steps = append(r.Steps, steps...)
	r.Ignored = append(r.Ignored, ignored...)
	sort.Strings(r.Ignored)
	return r, nil
}

// ignitionVersion returns the ignition section of the config top and
// whether the config is of spec 2.x (else 3.x, the only other supported).
func ignitionVersion(top map[string]json.RawMessage) (meta map[string]json.RawMessage, v2 bool, err error) {
	if err := json.Unmarshal(top["ignition"], &meta); err != nil || meta == nil {
		return nil, false, errors.New("no ignition section")
	}
	var version string
	if err := json.Unmarshal(meta["version"], &version); err != nil || version == "" {
		return nil, false, errors.New("ignition.version missing or not a string")
	}
	major, _, _ := strings.Cut(version, ".")
	if major != "2" && major != "3" {
		return nil, false, fmt.Errorf("unsupported ignition.version %q (want 2.x or 3.x)", version)
	}
	return meta, major == "2", nil
}

// ignitionFiles turns storage.files (raw, null when absent) into the steps
// writing them, within one budget of decoded content.
func ignitionFiles(raw json.RawMessage, v2 bool) ([]Step, error) {
	if isNull(raw) {
		return nil, nil
	}
	var files []json.RawMessage
	if err := json.Unmarshal(raw, &files); err != nil {
		return nil, errors.New("storage.files: not a list")
	}
	var out []Step
	var budget decodedBudget
	for i, raw := range files {
		steps, err := ignitionFile(raw, v2)
		if err != nil {
			return nil, fmt.Errorf("storage.files[%d]: %w", i, err)
		}
		for _, s := range steps {
			if err := budget.spend(s.File.Content); err != nil {
				return nil, fmt.Errorf("storage.files[%d]: %w", i, err)
			}
		}
		out = append(out, steps...)
	}
	return out, nil
}

// ignitionUnits turns systemd.units (raw, null when absent) into the steps
// writing the units and their dropins, reloading systemd after any was
// written, and enabling the enabled ones; masking is ignored, and said so.
func ignitionUnits(raw json.RawMessage, v2 bool) (steps []Step, ignored []string, err error) {
	if isNull(raw) {
		return nil, nil, nil
	}
	var units []ignUnit
	if err := json.Unmarshal(raw, &units); err != nil {
		return nil, nil, fmt.Errorf("systemd.units: %w", jsonFieldError(err))
	}
	var enable []string
	written, masked := false, false
	for i, u := range units {
		files, err := ignitionUnitFiles(i, u)
		if err != nil {
			return nil, nil, err
		}
		steps = append(steps, files...)
		written = written || len(files) > 0
		if u.Mask {
			masked = true
		}
		if (u.Enabled != nil && *u.Enabled) || (u.Enable && v2) {
			enable = append(enable, u.Name)
		}
	}
	if masked {
		ignored = append(ignored, "systemd.units.mask")
	}
	if written {
		steps = append(steps, Step{Command: []string{"systemctl", "daemon-reload"}})
	}
	for _, name := range enable {
		steps = append(steps, Step{Command: []string{"systemctl", "enable", "--now", name}})
	}
	return steps, ignored, nil
}

// ignitionUnitFiles returns the steps writing the unit u, systemd.units[i],
// and those of its dropins that have contents.
func ignitionUnitFiles(i int, u ignUnit) ([]Step, error) {
	var steps []Step
	if err := checkUnitName(u.Name); err != nil {
		return nil, fmt.Errorf("systemd.units[%d]: %w", i, err)
	}
	if u.Contents != nil {
		steps = append(steps, Step{File: &File{
			Path: systemdUnitDir + "/" + u.Name, Content: []byte(*u.Contents), Mode: DefaultFileMode,
		}})
	}
	for j, d := range u.Dropins {
		if err := checkUnitName(d.Name); err != nil {
			return nil, fmt.Errorf("systemd.units[%d].dropins[%d]: %w", i, j, err)
		}
		if d.Contents == nil {
			continue
		}
		steps = append(steps, Step{File: &File{
			Path: systemdUnitDir + "/" + u.Name + ".d/" + d.Name, Content: []byte(*d.Contents), Mode: DefaultFileMode,
		}})
	}
	return steps, nil
}

// section returns a top-level object (storage, systemd), nil when absent.
func section(top map[string]json.RawMessage, name string) (map[string]json.RawMessage, error) {
	raw := top[name]
	if isNull(raw) {
		return nil, nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("%s: not an object", name)
	}
	return m, nil
}

// ignoredKeys lists the keys of m not in handled whose value is not empty.
func ignoredKeys(prefix string, m map[string]json.RawMessage, handled ...string) []string {
	var out []string
outer:
	for k, v := range m {
		for _, h := range handled {
			if k == h {
				continue outer
			}
		}
		if !isEmptyJSON(v) {
			out = append(out, prefix+k)
		}
	}
	return out
}

// isEmptyJSON reports whether v is null, [], or an object whose values are
// all empty, such as CABPK's "security": {"tls": {}}.
func isEmptyJSON(v json.RawMessage) bool {
	switch string(bytes.TrimSpace(v)) {
	case "", "null", "{}", "[]":
		return true
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(v, &m) != nil || m == nil {
		return false
	}
	for _, e := range m {
		if !isEmptyJSON(e) {
			return false
		}
	}
	return true
}

func checkUnitName(name string) error {
	switch {
	case name == "":
		return errors.New("no name")
	case name == "." || name == ".." || strings.ContainsAny(name, "/\x00"):
		return fmt.Errorf("invalid name %q", name)
	}
	return nil
}

// jsonFieldError turns a JSON decoding error into a short message naming the
// field.
func jsonFieldError(err error) error {
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &typeErr) && typeErr.Field != "" {
		return fmt.Errorf("%s: wrong type (%s)", typeErr.Field, typeErr.Value)
	}
	return errors.New("wrong type")
}

func ignitionFile(raw json.RawMessage, v2 bool) ([]Step, error) {
	var f ignFile
	if err := json.Unmarshal(raw, &f); err != nil {
		return nil, jsonFieldError(err)
	}
	if f.Path == nil {
		return nil, errors.New("no path")
	}
	p, err := cleanPath(*f.Path)
	if err != nil {
		return nil, err
	}
	mode := DefaultFileMode
	if f.Mode != nil {
		if mode, err = unixMode(*f.Mode, "0"+strconv.FormatInt(*f.Mode, 8)); err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
	}
	owner := ignitionOwner(f.User, f.Group)
	pieces, err := ignitionPieces(f, v2)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}

	steps := make([]Step, 0, len(pieces))
	for _, pc := range pieces {
		content, err := ignitionContent(pc.res)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		if p == kubeadmScriptPath {
			content = []byte(adaptKubeadmScript(string(content)))
		}
		steps = append(steps, Step{File: &File{Path: p, Content: content, Mode: mode, Owner: owner, Append: pc.append}})
	}
	return steps, nil
}

// ignPiece is one write of a file: its contents replace the file, or are
// appended to it.
type ignPiece struct {
	res    ignResource
	append bool
}

// ignitionPieces returns what to write to the file f: in 3.x the contents
// (if given, or if there is nothing to append) replace the file, then each
// append resource is appended; in 2.x the contents are appended when
// append is true.
func ignitionPieces(f ignFile, v2 bool) ([]ignPiece, error) {
	var contents ignResource
	if f.Contents != nil {
		contents = *f.Contents
	}
	if v2 {
		appendMode := false
		if !isNull(f.Append) {
			if err := json.Unmarshal(f.Append, &appendMode); err != nil {
				return nil, errors.New("append is not a boolean (spec 2.x)")
			}
		}
		return []ignPiece{{contents, appendMode}}, nil
	}
	var appends []ignResource
	if !isNull(f.Append) {
		if err := json.Unmarshal(f.Append, &appends); err != nil {
			return nil, errors.New("append is not a list of resources (spec 3.x)")
		}
	}
	var pieces []ignPiece
	if f.Contents != nil || len(appends) == 0 {
		pieces = append(pieces, ignPiece{contents, false})
	}
	for _, a := range appends {
		pieces = append(pieces, ignPiece{a, true})
	}
	return pieces, nil
}

// ignitionOwner renders Ignition's user and group as "user:group"; a missing
// half is root, as in Ignition; "" when neither is given.
func ignitionOwner(user, group *ignNode) string {
	name := func(n *ignNode) string {
		switch {
		case n == nil:
			return ""
		case n.Name != "":
			return n.Name
		case n.ID != nil:
			return strconv.FormatInt(*n.ID, 10)
		}
		return ""
	}
	u, g := name(user), name(group)
	if u == "" && g == "" {
		return ""
	}
	if u == "" {
		u = "root"
	}
	if g == "" {
		g = "root"
	}
	return u + ":" + g
}

// ignitionContent fetches a resource: only data URLs are supported, as the
// executor has no network access on the node's behalf.
func ignitionContent(res ignResource) ([]byte, error) {
	var content []byte
	if res.Source != nil && *res.Source != "" {
		var err error
		if content, err = decodeDataURL(strings.TrimLeft(*res.Source, " \t\r\n")); err != nil {
			return nil, err
		}
	}
	comp := ""
	if res.Compression != nil {
		comp = *res.Compression
	}
	switch comp {
	case "":
		return content, nil
	case "gzip":
		return gunzip(content)
	}
	return nil, fmt.Errorf("unsupported compression %q", comp)
}

// decodeDataURL decodes an RFC 2397 data URL:
// data:[<mediatype>][;base64],<data>, the data percent-encoded or base64.
func decodeDataURL(s string) ([]byte, error) {
	scheme, rest, ok := strings.Cut(s, ":")
	if !ok || !strings.EqualFold(scheme, "data") {
		return nil, fmt.Errorf("source %q is not a data URL (other URLs are not supported)", truncate(s, 40))
	}
	header, payload, ok := strings.Cut(rest, ",")
	if !ok {
		return nil, errors.New("data URL has no comma")
	}
	isBase64 := false
	params := strings.Split(header, ";")
	if last := params[len(params)-1]; strings.EqualFold(strings.TrimSpace(last), "base64") {
		isBase64 = true
	}
	decoded, err := url.PathUnescape(payload)
	if err != nil {
		return nil, fmt.Errorf("data URL: bad percent-encoding: %w", err)
	}
	if !isBase64 {
		return []byte(decoded), nil
	}
	b, err := decodeBase64(decoded)
	if err != nil {
		return nil, fmt.Errorf("data URL: %w", err)
	}
	return b, nil
}
