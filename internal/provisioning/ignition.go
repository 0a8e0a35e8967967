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

	ign3 "github.com/coreos/ignition/v2/config/v3_5/types"
	ign2 "github.com/flatcar/ignition/config/v2_3/types"
)

// kubeadmScriptPath is where CABPK's Ignition output puts the script that
// runs kubeadm (started by its kubeadm.service unit).
const kubeadmScriptPath = "/etc/kubeadm.sh"

// systemdUnitDir is where Ignition writes systemd units.
const systemdUnitDir = "/etc/systemd/system"

// The files and units are decoded into the Ignition project's own types:
// spec 3.x into github.com/coreos/ignition/v2's 3.5 types (every 3.x spec
// is a subset of 3.5's fields), spec 2.x into Flatcar's Ignition 2.3 types,
// the ones CABPK builds its output with. Only encoding/json runs on the data:
// Ignition's own parsers also validate the whole document, and on hostile
// data within MaxDataSize (150,000 duplicate files, a million-element array
// under an unknown key) they took 2 to over 50 seconds and allocated up to
// 5 GiB, in a manager that parses every Machine's data.

// planIgnition turns an Ignition config (spec 2.x or 3.x) into steps: the
// files, then the systemd units and dropins, `systemctl daemon-reload`, and
// `systemctl enable --now` for each enabled unit.
func planIgnition(data []byte) (Result, error) {
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) == 0 {
		return Result{}, errors.New("empty")
	}
	// The raw sections name what is ignored, including keys unknown to
	// Ignition's types, which decoding into them would drop silently.
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

// ignitionFile is what CAPCT acts on of one storage.files entry, whichever
// spec it came in.
type ignitionFile struct {
	path   string
	mode   *int
	owner  string
	writes []ignitionWrite
}

// ignitionWrite is one write of a file: a resource whose contents replace
// the file, or are appended to it.
type ignitionWrite struct {
	source, compression string
	append              bool
}

// ignitionFiles turns storage.files (raw, null when absent) into the steps
// writing them, within one budget of decoded content.
func ignitionFiles(raw json.RawMessage, v2 bool) ([]Step, error) {
	if isNull(raw) {
		return nil, nil
	}
	// Entry by entry, so that errors name the entry's index.
	var files []json.RawMessage
	if err := json.Unmarshal(raw, &files); err != nil {
		return nil, errors.New("storage.files: not a list")
	}
	var out []Step
	var budget decodedBudget
	for i, raw := range files {
		f, err := decodeIgnitionFile(raw, v2)
		if err != nil {
			return nil, fmt.Errorf("storage.files[%d]: %w", i, err)
		}
		steps, err := f.steps()
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

// decodeIgnitionFile decodes one storage.files entry with the types of its
// spec.
func decodeIgnitionFile(raw json.RawMessage, v2 bool) (ignitionFile, error) {
	if v2 {
		var f ign2.File
		if err := json.Unmarshal(raw, &f); err != nil {
			return ignitionFile{}, jsonFieldError(err, "2.x")
		}
		return fileFromV2(f), nil
	}
	var f ign3.File
	if err := json.Unmarshal(raw, &f); err != nil {
		return ignitionFile{}, jsonFieldError(err, "3.x")
	}
	return fileFromV3(f), nil
}

// fileFromV2: in spec 2.x the contents are appended when append is true.
func fileFromV2(f ign2.File) ignitionFile {
	var user, group string
	if f.User != nil {
		user = ownerName(&f.User.Name, f.User.ID)
	}
	if f.Group != nil {
		group = ownerName(&f.Group.Name, f.Group.ID)
	}
	return ignitionFile{
		path:   f.Path,
		mode:   f.Mode,
		owner:  ownerPair(user, group),
		writes: []ignitionWrite{{source: f.Contents.Source, compression: f.Contents.Compression, append: f.Append}},
	}
}

// fileFromV3: in spec 3.x a contents source (or, when there is nothing to
// append, empty contents) replaces the file, then each append resource is
// appended, as Ignition does.
func fileFromV3(f ign3.File) ignitionFile {
	out := ignitionFile{
		path:  f.Path,
		mode:  f.Mode,
		owner: ownerPair(ownerName(f.User.Name, f.User.ID), ownerName(f.Group.Name, f.Group.ID)),
	}
	if f.Contents.Source != nil || len(f.Append) == 0 {
		out.writes = append(out.writes, ignitionWrite{source: deref(f.Contents.Source), compression: deref(f.Contents.Compression)})
	}
	for _, a := range f.Append {
		out.writes = append(out.writes, ignitionWrite{source: deref(a.Source), compression: deref(a.Compression), append: true})
	}
	return out
}

// steps returns the steps writing f, its contents decoded.
func (f ignitionFile) steps() ([]Step, error) {
	if f.path == "" {
		return nil, errors.New("no path")
	}
	p, err := cleanPath(f.path)
	if err != nil {
		return nil, err
	}
	mode := DefaultFileMode
	if f.mode != nil {
		m := int64(*f.mode)
		if mode, err = unixMode(m, "0"+strconv.FormatInt(m, 8)); err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
	}
	steps := make([]Step, 0, len(f.writes))
	for _, w := range f.writes {
		content, err := ignitionContent(w.source, w.compression)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		if p == kubeadmScriptPath {
			content = []byte(adaptKubeadmScript(string(content)))
		}
		steps = append(steps, Step{File: &File{Path: p, Content: content, Mode: mode, Owner: f.owner, Append: w.append}})
	}
	return steps, nil
}

// ignitionUnit is what CAPCT acts on of one systemd.units entry, whichever
// spec it came in.
type ignitionUnit struct {
	name            string
	contents        string // the unit is written when not empty, as in Ignition
	dropins         []ignitionDropin
	enabled, masked bool
}

type ignitionDropin struct {
	name     string
	contents *string // nil: not written
}

// ignitionUnits turns systemd.units (raw, null when absent) into the steps
// writing the units and their dropins, reloading systemd after any was
// written, and enabling the enabled ones; masking is ignored, and said so.
func ignitionUnits(raw json.RawMessage, v2 bool) (steps []Step, ignored []string, err error) {
	if isNull(raw) {
		return nil, nil, nil
	}
	units, err := decodeIgnitionUnits(raw, v2)
	if err != nil {
		return nil, nil, fmt.Errorf("systemd.units: %w", err)
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
		masked = masked || u.masked
		if u.enabled {
			enable = append(enable, u.name)
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

// decodeIgnitionUnits decodes systemd.units with the types of its spec.
func decodeIgnitionUnits(raw json.RawMessage, v2 bool) ([]ignitionUnit, error) {
	var out []ignitionUnit
	if v2 {
		var units []ign2.Unit
		if err := json.Unmarshal(raw, &units); err != nil {
			return nil, jsonFieldError(err, "2.x")
		}
		for _, u := range units {
			dropins := make([]ignitionDropin, 0, len(u.Dropins))
			for _, d := range u.Dropins {
				// Spec 2.x types cannot tell empty contents from none;
				// Ignition 2.x writes neither.
				var contents *string
				if d.Contents != "" {
					contents = &d.Contents
				}
				dropins = append(dropins, ignitionDropin{name: d.Name, contents: contents})
			}
			// enable is 2.x's deprecated form of enabled.
			enabled := (u.Enabled != nil && *u.Enabled) || u.Enable
			out = append(out, ignitionUnit{name: u.Name, contents: u.Contents, dropins: dropins, enabled: enabled, masked: u.Mask})
		}
		return out, nil
	}
	var units []ign3.Unit
	if err := json.Unmarshal(raw, &units); err != nil {
		return nil, jsonFieldError(err, "3.x")
	}
	for _, u := range units {
		dropins := make([]ignitionDropin, 0, len(u.Dropins))
		for _, d := range u.Dropins {
			dropins = append(dropins, ignitionDropin{name: d.Name, contents: d.Contents})
		}
		out = append(out, ignitionUnit{
			name: u.Name, contents: deref(u.Contents), dropins: dropins,
			enabled: u.Enabled != nil && *u.Enabled, masked: u.Mask != nil && *u.Mask,
		})
	}
	return out, nil
}

// ignitionUnitFiles returns the steps writing the unit u, systemd.units[i],
// if it has contents, and those of its dropins that have contents.
func ignitionUnitFiles(i int, u ignitionUnit) ([]Step, error) {
	var steps []Step
	if err := checkUnitName(u.name); err != nil {
		return nil, fmt.Errorf("systemd.units[%d]: %w", i, err)
	}
	if u.contents != "" {
		steps = append(steps, Step{File: &File{
			Path: systemdUnitDir + "/" + u.name, Content: []byte(u.contents), Mode: DefaultFileMode,
		}})
	}
	for j, d := range u.dropins {
		if err := checkUnitName(d.name); err != nil {
			return nil, fmt.Errorf("systemd.units[%d].dropins[%d]: %w", i, j, err)
		}
		if d.contents == nil {
			continue
		}
		steps = append(steps, Step{File: &File{
			Path: systemdUnitDir + "/" + u.name + ".d/" + d.name, Content: []byte(*d.contents), Mode: DefaultFileMode,
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

// jsonFieldError turns an error decoding into Ignition's types of spec into
// a short message naming the field by its JSON keys.
func jsonFieldError(err error, spec string) error {
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &typeErr) && typeErr.Field != "" {
		return fmt.Errorf("%s: wrong type (%s) for spec %s", jsonKeys(typeErr.Field), typeErr.Value, spec)
	}
	return fmt.Errorf("wrong type for spec %s", spec)
}

// jsonKeys drops from the dotted path of a decoding error the Go names of
// the structs Ignition's types embed (Node, FileEmbedded1): every key of
// Ignition's JSON starts with a lower-case letter.
func jsonKeys(field string) string {
	parts := strings.Split(field, ".")
	keys := parts[:0]
	for _, p := range parts {
		if p != "" && p[0] >= 'A' && p[0] <= 'Z' {
			continue
		}
		keys = append(keys, p)
	}
	return strings.Join(keys, ".")
}

// ownerName is a user or group by name, else by id; "" when neither.
func ownerName(name *string, id *int) string {
	switch {
	case name != nil && *name != "":
		return *name
	case id != nil:
		return strconv.Itoa(*id)
	}
	return ""
}

// ownerPair renders Ignition's user and group as "user:group"; a missing
// half is root, as in Ignition; "" when neither is given.
func ownerPair(user, group string) string {
	if user == "" && group == "" {
		return ""
	}
	if user == "" {
		user = "root"
	}
	if group == "" {
		group = "root"
	}
	return user + ":" + group
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// ignitionContent fetches a resource: only data URLs are supported, as the
// executor has no network access on the node's behalf.
func ignitionContent(source, compression string) ([]byte, error) {
	var content []byte
	if source != "" {
		var err error
		if content, err = decodeDataURL(strings.TrimLeft(source, " \t\r\n")); err != nil {
			return nil, err
		}
	}
	switch compression {
	case "":
		return content, nil
	case "gzip":
		return gunzip(content)
	}
	return nil, fmt.Errorf("unsupported compression %q", compression)
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
