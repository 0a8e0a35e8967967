package provisioning

import (
	"path"
	"regexp"
	"strings"
)

// IgnoredPreflightErrors are the kubeadm preflight checks that fail on
// container nodes and are therefore added to `kubeadm init` and `kubeadm
// join`: SystemVerification (the kernel and cgroup checks see the host's
// kernel, whose config is not in the container), Swap (the host may have swap
// on; the kubelet must be configured with failSwapOn=false) and the
// bridge-nf-call-iptables sysctl (not namespaced, so /proc/sys inside the
// container may lack it or be read-only).
const IgnoredPreflightErrors = "SystemVerification,Swap,FileContent--proc-sys-net-bridge-bridge-nf-call-iptables"

const preflightFlag = "--ignore-preflight-errors"

// mergePreflight merges IgnoredPreflightErrors into an existing
// --ignore-preflight-errors value: kept as is when it already has "all"
// (kubeadm rejects "all" next to named checks), else the missing checks are
// appended in order, compared case-insensitively as kubeadm does.
func mergePreflight(existing string) string {
	var have []string
	for _, v := range strings.Split(existing, ",") {
		v = strings.TrimSpace(v)
		if v == "" {
			continue
		}
		if strings.EqualFold(v, "all") {
			return existing
		}
		have = append(have, v)
	}
	for _, want := range strings.Split(IgnoredPreflightErrors, ",") {
		found := false
		for _, h := range have {
			if strings.EqualFold(h, want) {
				found = true
				break
			}
		}
		if !found {
			have = append(have, want)
		}
	}
	return strings.Join(have, ",")
}

// isShell reports whether name (argv[0]) is a POSIX-ish shell.
func isShell(name string) bool {
	switch path.Base(name) {
	case "sh", "bash", "dash", "ash", "zsh", "ksh":
		return true
	}
	return false
}

// adaptKubeadmArgv adapts a command given as an argv: `kubeadm init|join ...`
// (kubeadm by any path), or a shell run with -c whose script calls kubeadm.
func adaptKubeadmArgv(argv []string) []string {
	if len(argv) == 0 {
		return argv
	}
	if isShell(argv[0]) {
		for i := 1; i < len(argv)-1; i++ {
			a := argv[i]
			if len(a) >= 2 && a[0] == '-' && a[1] != '-' && strings.ContainsRune(a, 'c') {
				out := append([]string(nil), argv...)
				out[i+1] = adaptKubeadmScript(out[i+1])
				return out
			}
			if !strings.HasPrefix(a, "-") {
				break
			}
		}
		return argv
	}
	if path.Base(argv[0]) != "kubeadm" || len(argv) < 2 || (argv[1] != "init" && argv[1] != "join") {
		return argv
	}
	insertAt := 2
	if len(argv) > 2 && argv[2] == "phase" {
		// Only the preflight phase takes the flag; the others reject it.
		if len(argv) < 4 || argv[3] != "preflight" {
			return argv
		}
		insertAt = 4
	}
	out := append([]string(nil), argv...)
	for i := insertAt; i < len(out); i++ {
		a := out[i]
		if a == "--" {
			break
		}
		if v, ok := strings.CutPrefix(a, preflightFlag+"="); ok {
			out[i] = preflightFlag + "=" + mergePreflight(v)
			return out
		}
		if a == preflightFlag && i+1 < len(out) {
			out[i+1] = mergePreflight(out[i+1])
			return out
		}
	}
	out = append(out[:insertAt], append([]string{preflightFlag + "=" + IgnoredPreflightErrors}, out[insertAt:]...)...)
	return out
}

// kubeadmInScript finds `kubeadm init` / `kubeadm join` (kubeadm by any path)
// in a shell script, optionally followed by `phase <name>`.
var kubeadmInScript = regexp.MustCompile("(?:^|[\\s;&|()'\"`/])kubeadm[ \\t]+(init|join)(?:[ \\t]+(phase)(?:[ \\t]+([A-Za-z0-9_/-]+))?)?")

// existingFlag finds --ignore-preflight-errors with its value (bare, or in
// single or double quotes), with = or blanks in between.
var existingFlag = regexp.MustCompile(`--ignore-preflight-errors(?:=|[ \t]+)(?:"([^"]*)"|'([^']*)'|([^\s'";&|)` + "`" + `]*))`)

// adaptKubeadmScript adapts every `kubeadm init|join` in a shell script. The
// command runs to the next shell operator (; & | ) newline or backquote);
// within it an existing --ignore-preflight-errors is merged, else the flag is
// inserted right after the subcommand (after `phase preflight` for that
// phase; other phases are left alone as they reject the flag).
func adaptKubeadmScript(script string) string {
	var b strings.Builder
	rest := script
	for {
		m := kubeadmInScript.FindStringSubmatchIndex(rest)
		if m == nil {
			break
		}
		end := m[1]    // end of the match
		subEnd := m[3] // end of init|join
		if m[4] >= 0 {
			// `phase` follows.
			if m[6] < 0 || rest[m[6]:m[7]] != "preflight" || !boundary(rest, m[7]) {
				b.WriteString(rest[:end])
				rest = rest[end:]
				continue
			}
			subEnd = m[7]
		}
		// The subcommand must end at a word boundary: `kubeadm initx` is
		// not kubeadm init.
		if !boundary(rest, subEnd) {
			b.WriteString(rest[:subEnd])
			rest = rest[subEnd:]
			continue
		}
		cmdEnd := subEnd + strings.IndexAny(rest[subEnd:]+"\n", ";&|)\n`")
		cmd := rest[subEnd:cmdEnd]
		b.WriteString(rest[:subEnd])
		if f := existingFlag.FindStringSubmatchIndex(cmd); f != nil {
			for g := 2; g < 8; g += 2 {
				if f[g] >= 0 {
					b.WriteString(cmd[:f[g]])
					b.WriteString(mergePreflight(cmd[f[g]:f[g+1]]))
					b.WriteString(cmd[f[g+1]:])
					break
				}
			}
		} else {
			b.WriteString(" " + preflightFlag + "=" + IgnoredPreflightErrors)
			b.WriteString(cmd)
		}
		rest = rest[cmdEnd:]
	}
	b.WriteString(rest)
	return b.String()
}

// boundary reports whether a word ending at i in s ends there.
func boundary(s string, i int) bool {
	if i >= len(s) {
		return true
	}
	switch s[i] {
	case ' ', '\t', '\n', '\r', ';', '&', '|', ')', '\'', '"', '`':
		return true
	}
	return false
}
