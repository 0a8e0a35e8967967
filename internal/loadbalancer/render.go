package loadbalancer

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync/atomic"
	"text/template"
	"text/template/parse"
	"time"
)

// Bounds on custom templates. A template comes from a ConfigMap that anyone
// who may create ContainerClusters can write; rendering it must not hold a
// reconcile worker or the manager's memory hostage.
const (
	// MaxTemplateSize bounds a custom template's text.
	MaxTemplateSize = 64 << 10
	// MaxConfigSize bounds the rendered configuration, and every value a
	// template function builds.
	MaxConfigSize = 1 << 20
	// maxBuilt bounds all the values one rendering builds together: a
	// rendering holds at most this much besides its output.
	maxBuilt = 4 * MaxConfigSize
	// RenderTimeout bounds a rendering.
	RenderTimeout = 2 * time.Second
	// maxRangeDepth bounds nested ranges: each ranges over the backends, so
	// the work is at most backends^maxRangeDepth.
	maxRangeDepth = 2
	// escapeGrowth is the most any formatting or escaping function makes of
	// one input byte: "% #x" turns a byte into "0x41 ", html into "&#34;",
	// js into "\u003C".
	escapeGrowth = 6
	// verbOverhead covers what a verb prints besides its operand: a
	// number's digits, a float's exponent, %!(BADWIDTH) and the like.
	verbOverhead = 64
)

// ErrTemplateRefused wraps every refusal of a custom template: too large,
// too slow, output too large, a value too large, or a construct whose cost
// is not bounded.
var ErrTemplateRefused = errors.New("custom HAProxy configuration template refused")

// errRenderStopped ends a rendering that its caller gave up on.
var errRenderStopped = errors.New("rendering stopped")

type limits struct {
	template, output, value, built int
	timeout                        time.Duration
}

// Render renders the default template, or custom when it is not empty (the
// "value" of the ConfigMap named by spec.loadBalancer.customHAProxyConfigTemplateRef).
// Custom templates see the same fields, CAPD's names for them and the
// JoinHostPort function (whose port may be a number or text). They may range
// only over .Backends or .BackendServers, nested at most twice, and may not
// define or call templates, so that their cost is bounded by the control
// plane's size. The text, the output, every value the template builds
// (print, printf, println, html, js, urlquery, JoinHostPort) and all of them
// together, and the time are bounded as well; call is refused.
func Render(custom string, cfg Config) ([]byte, error) {
	return render(custom, cfg, limits{
		template: MaxTemplateSize, output: MaxConfigSize, value: MaxConfigSize, built: maxBuilt, timeout: RenderTimeout,
	})
}

func render(custom string, cfg Config, lim limits) ([]byte, error) {
	text := defaultTemplate
	if custom != "" {
		if len(custom) > lim.template {
			return nil, fmt.Errorf("%w: it is %d bytes, more than %d", ErrTemplateRefused, len(custom), lim.template)
		}
		text = custom
	}
	budget := &renderBudget{value: lim.value, built: lim.built}
	tmpl, err := template.New("haproxy").Funcs(budget.funcs()).Option("missingkey=error").Parse(text)
	if err != nil {
		return nil, fmt.Errorf("failed to parse the HAProxy configuration template: %w", err)
	}
	if len(tmpl.Templates()) > 1 {
		return nil, fmt.Errorf("%w: it defines templates", ErrTemplateRefused)
	}
	if err := checkCost(tmpl.Root, 0); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrTemplateRefused, err)
	}
	out := &boundedWriter{limit: lim.output, budget: budget}
	done := make(chan error, 1)
	cfg = cfg.withCAPDNames()
	go func() { done <- tmpl.Execute(out, cfg) }()
	timer := time.NewTimer(lim.timeout)
	defer timer.Stop()
	select {
	case err := <-done:
		if err != nil {
			return nil, fmt.Errorf("failed to render the HAProxy configuration template: %w", err)
		}
		return out.buf.Bytes(), nil
	case <-timer.C:
		// The execution cannot be interrupted from outside; it ends at its
		// next write or function call, and checkCost bounds what it can do
		// without either.
		budget.stop()
		return nil, fmt.Errorf("%w: rendering took longer than %s", ErrTemplateRefused, lim.timeout)
	}
}

// renderBudget bounds what one rendering builds. text/template's only ways
// to make a new value are its functions: every one that builds text is
// replaced by one that first works out an upper bound of the result's
// size, refuses it above value bytes or once the rendering has built
// built bytes in all, and only then builds it. Checking after building
// would be too late: printf "%01000000d" allocates its megabyte before it
// returns, and twelve print $a $a doublings of it are 4 GiB.
//
// The other builtins (and, or, not, len, index, slice, the comparisons)
// return a bool, a number or a part of a value that exists already.
type renderBudget struct {
	value, built int
	// spent is touched only by the goroutine that executes the template.
	spent   int
	stopped atomic.Bool
}

func (b *renderBudget) stop() { b.stopped.Store(true) }

// charge accounts for a value of at most n bytes about to be built.
func (b *renderBudget) charge(n int) error {
	if b.stopped.Load() {
		return errRenderStopped
	}
	if n > b.value {
		return fmt.Errorf("%w: a value of up to %d bytes, more than %d", ErrTemplateRefused, n, b.value)
	}
	if b.spent+n > b.built {
		return fmt.Errorf("%w: it builds more than %d bytes of values", ErrTemplateRefused, b.built)
	}
	b.spent += n
	return nil
}

// funcs are the template's functions: JoinHostPort and the budgeted
// replacements of text/template's builtins that build text. A function of
// the map shadows the builtin of the same name.
func (b *renderBudget) funcs() template.FuncMap {
	return template.FuncMap{
		"JoinHostPort": func(host string, port any) (string, error) {
			if err := b.charge(b.operandsSize([]any{host, port}) + 2); err != nil {
				return "", err
			}
			return net.JoinHostPort(host, fmt.Sprint(port)), nil
		},
		"print": func(args ...any) (string, error) {
			if err := b.charge(b.operandsSize(args) + len(args)); err != nil {
				return "", err
			}
			return fmt.Sprint(args...), nil
		},
		"println": func(args ...any) (string, error) {
			if err := b.charge(b.operandsSize(args) + len(args) + 1); err != nil {
				return "", err
			}
			return fmt.Sprintln(args...), nil
		},
		"printf": func(format string, args ...any) (string, error) {
			bound, err := b.printfBound(format, args)
			if err != nil {
				return "", err
			}
			if err := b.charge(bound); err != nil {
				return "", err
			}
			return fmt.Sprintf(format, args...), nil
		},
		"html":     b.escaper(template.HTMLEscaper),
		"js":       b.escaper(template.JSEscaper),
		"urlquery": b.escaper(template.URLQueryEscaper),
		"call": func(any, ...any) (any, error) {
			return nil, fmt.Errorf("%w: it uses call", ErrTemplateRefused)
		},
	}
}

func (b *renderBudget) escaper(escape func(...any) string) func(...any) (string, error) {
	return func(args ...any) (string, error) {
		if err := b.charge(escapeGrowth * (b.operandsSize(args) + len(args))); err != nil {
			return "", err
		}
		return escape(args...), nil
	}
}

// operandsSize is the printed size of operands, counted no further than
// one byte past the value bound. Text is measured without formatting it;
// anything else can only come from the configuration or the template's
// own literals (no function makes other kinds of value), so formatting it
// to measure it is bounded by the control plane's size.
func (b *renderBudget) operandsSize(args []any) int {
	size := 0
	for _, arg := range args {
		if size > b.value {
			break
		}
		switch v := arg.(type) {
		case string:
			size += len(v)
		case []byte:
			size += len(v)
		default:
			size += len(fmt.Sprint(v))
		}
	}
	return size
}

// printfBound is an upper bound of what printf prints of format and args.
// Each verb prints at most its width, its precision and its operand grown
// by escapeGrowth; as a verb may name any operand (%[2]s), each is taken to
// print the largest. Operands without a verb print as %!(EXTRA …). A width
// or precision taken from an operand (*) is refused: its size would be
// known only once formatted.
func (b *renderBudget) printfBound(format string, args []any) (int, error) {
	largest := 0
	for _, arg := range args {
		largest = max(largest, b.operandsSize([]any{arg}))
	}
	perVerb := escapeGrowth*largest + verbOverhead
	bound := len(format) + len(args)*perVerb
	for i := 0; i < len(format); i++ {
		if format[i] != '%' {
			continue
		}
		i++
		for i < len(format) && bytes.IndexByte([]byte("+-# 0"), format[i]) >= 0 {
			i++
		}
		next, size, err := b.widthAndPrecision(format, i)
		if err != nil {
			return 0, err
		}
		bound += size
		i = skipArgIndex(format, next)
		if i < len(format) && format[i] != '%' {
			bound += perVerb
		}
	}
	return bound, nil
}

// widthAndPrecision reads the width and precision of the verb whose flags
// end at format[i], and returns the index after them and their sum (what
// they can add to the verb's output).
func (b *renderBudget) widthAndPrecision(format string, i int) (int, int, error) {
	sum := 0
	for _, part := range []string{"width", "precision"} {
		if part == "precision" {
			if i >= len(format) || format[i] != '.' {
				break
			}
			i++
		}
		i = skipArgIndex(format, i)
		if i < len(format) && format[i] == '*' {
			return 0, 0, fmt.Errorf("%w: printf takes a %s from an operand (*)", ErrTemplateRefused, part)
		}
		start := i
		for i < len(format) && format[i] >= '0' && format[i] <= '9' {
			i++
		}
		if i == start {
			continue
		}
		n, err := strconv.Atoi(format[start:i])
		if err != nil || n > b.value {
			return 0, 0, fmt.Errorf("%w: printf %s %s is more than %d", ErrTemplateRefused, part, format[start:i], b.value)
		}
		sum += n
	}
	return i, sum, nil
}

// skipArgIndex skips an explicit operand index such as [2] at format[i:].
func skipArgIndex(format string, i int) int {
	if i >= len(format) || format[i] != '[' {
		return i
	}
	for j := i + 1; j < len(format); j++ {
		if format[j] == ']' {
			return j + 1
		}
	}
	return i
}

// checkCost refuses what would make a template's cost unbounded: ranging
// over anything but the backends (a number ranges that many times), ranges
// nested deeper than maxRangeDepth, and calling templates (which recurse).
func checkCost(node parse.Node, depth int) error {
	switch n := node.(type) {
	case *parse.ListNode:
		if n == nil {
			return nil
		}
		for _, c := range n.Nodes {
			if err := checkCost(c, depth); err != nil {
				return err
			}
		}
	case *parse.RangeNode:
		if !isBackends(n.Pipe) {
			return fmt.Errorf("line %d: range over %s: only .Backends and .BackendServers may be ranged over", n.Line, n.Pipe)
		}
		if depth+1 > maxRangeDepth {
			return fmt.Errorf("line %d: ranges nested deeper than %d", n.Line, maxRangeDepth)
		}
		return errors.Join(checkCost(n.List, depth+1), checkCost(n.ElseList, depth))
	case *parse.IfNode:
		return errors.Join(checkCost(n.List, depth), checkCost(n.ElseList, depth))
	case *parse.WithNode:
		return errors.Join(checkCost(n.List, depth), checkCost(n.ElseList, depth))
	case *parse.TemplateNode:
		return fmt.Errorf("line %d: calls template %q", n.Line, n.Name)
	}
	return nil
}

// isBackends reports whether a range pipeline is the backends, under
// either name (.Backends, .BackendServers, or the same after $), with or
// without declared variables.
func isBackends(pipe *parse.PipeNode) bool {
	if pipe == nil || len(pipe.Cmds) != 1 || len(pipe.Cmds[0].Args) != 1 {
		return false
	}
	backends := func(name string) bool { return name == "Backends" || name == "BackendServers" }
	switch arg := pipe.Cmds[0].Args[0].(type) {
	case *parse.FieldNode:
		return len(arg.Ident) == 1 && backends(arg.Ident[0])
	case *parse.VariableNode:
		return len(arg.Ident) == 2 && arg.Ident[0] == "$" && backends(arg.Ident[1])
	}
	return false
}

// boundedWriter fails writes beyond limit bytes, or once the rendering is
// stopped, which ends a template's execution at its next write.
type boundedWriter struct {
	buf    bytes.Buffer
	limit  int
	budget *renderBudget
}

func (w *boundedWriter) Write(p []byte) (int, error) {
	if w.budget.stopped.Load() {
		return 0, errRenderStopped
	}
	if w.buf.Len()+len(p) > w.limit {
		return 0, fmt.Errorf("%w: the configuration is larger than %d bytes", ErrTemplateRefused, w.limit)
	}
	return w.buf.Write(p)
}
