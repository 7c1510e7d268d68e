package main

import (
	"regexp"
	"strings"
	"unicode"
)

// mdFile is one Markdown file: its lines, and which of them are inside a
// fenced code block.
type mdFile struct {
	path  string // relative to the repository root, slash-separated
	lines []string
	code  []bool
}

func parseMarkdown(path, text string) *mdFile {
	f := &mdFile{path: path, lines: strings.Split(text, "\n")}
	f.code = make([]bool, len(f.lines))
	fence := ""
	for i, l := range f.lines {
		t := strings.TrimLeft(l, " ")
		switch {
		case fence != "":
			f.code[i] = true
			if strings.HasPrefix(t, fence) && strings.TrimSpace(strings.TrimLeft(t, fence[:1])) == "" {
				fence = ""
			}
		case strings.HasPrefix(t, "```") || strings.HasPrefix(t, "~~~"):
			f.code[i] = true
			fence = t[:3]
		}
	}
	return f
}

// text returns the whole file.
func (f *mdFile) text() string { return strings.Join(f.lines, "\n") }

// heading reports whether line i is an ATX heading, and its level and
// title.
func (f *mdFile) heading(i int) (level int, title string, ok bool) {
	if f.code[i] {
		return 0, "", false
	}
	l := f.lines[i]
	for level < len(l) && l[level] == '#' {
		level++
	}
	if level == 0 || level > 6 || level == len(l) || l[level] != ' ' {
		return 0, "", false
	}
	return level, strings.TrimSpace(strings.TrimRight(strings.TrimSpace(l[level:]), "#")), true
}

// section returns the line range [start, end) of the section under the
// heading whose title is title (the heading line excluded), up to the next
// heading of the same or a higher level; ok is false without one.
func (f *mdFile) section(title string) (start, end int, ok bool) {
	for i := range f.lines {
		level, t, isHeading := f.heading(i)
		if !isHeading || t != title {
			continue
		}
		for j := i + 1; j < len(f.lines); j++ {
			if l, _, h := f.heading(j); h && l <= level {
				return i + 1, j, true
			}
		}
		return i + 1, len(f.lines), true
	}
	return 0, 0, false
}

// tableRow is one body row of a Markdown table: its cells and its line
// number (1-based).
type tableRow struct {
	line  int
	cells []string
}

// firstTable returns the body rows of the first table in lines
// [start, end) (the header and the delimiter row left out).
func (f *mdFile) firstTable(start, end int) []tableRow {
	var rows []tableRow
	in := false
	n := 0
	for i := start; i < end; i++ {
		l := strings.TrimSpace(f.lines[i])
		if f.code[i] || !strings.HasPrefix(l, "|") {
			if in {
				break
			}
			continue
		}
		in = true
		n++
		if n <= 2 { // header, delimiter
			continue
		}
		rows = append(rows, tableRow{line: i + 1, cells: splitRow(l)})
	}
	return rows
}

// splitRow splits a table row into its cells, leaving pipes inside code
// spans and escaped pipes in their cell.
func splitRow(l string) []string {
	l = strings.TrimPrefix(strings.TrimSuffix(l, "|"), "|")
	var cells []string
	var b strings.Builder
	inCode := false
	for i := 0; i < len(l); i++ {
		c := l[i]
		switch {
		case c == '\\' && i+1 < len(l) && l[i+1] == '|':
			b.WriteByte('|')
			i++
		case c == '`':
			inCode = !inCode
			b.WriteByte(c)
		case c == '|' && !inCode:
			cells = append(cells, strings.TrimSpace(b.String()))
			b.Reset()
		default:
			b.WriteByte(c)
		}
	}
	return append(cells, strings.TrimSpace(b.String()))
}

var codeSpan = regexp.MustCompile("`([^`]+)`")

// codeSpans returns the contents of the code spans of s.
func codeSpans(s string) []string {
	var out []string
	for _, m := range codeSpan.FindAllStringSubmatch(s, -1) {
		out = append(out, strings.TrimSpace(m[1]))
	}
	return out
}

// link is a Markdown link or image target outside code.
type link struct {
	line   int
	target string
}

var (
	inlineLink = regexp.MustCompile(`!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)`)
	refDef     = regexp.MustCompile(`^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$`)
)

// links returns the link targets of f outside code blocks and code spans.
func (f *mdFile) links() []link {
	var out []link
	for i, l := range f.lines {
		if f.code[i] {
			continue
		}
		l = codeSpan.ReplaceAllString(l, "")
		for _, m := range inlineLink.FindAllStringSubmatch(l, -1) {
			out = append(out, link{i + 1, m[1]})
		}
		if m := refDef.FindStringSubmatch(l); m != nil {
			out = append(out, link{i + 1, m[1]})
		}
	}
	return out
}

// anchors returns the anchors GitHub gives f's headings (and explicit
// <a name> or id attributes).
func (f *mdFile) anchors() map[string]bool {
	out := map[string]bool{}
	count := map[string]int{}
	for i := range f.lines {
		if _, title, ok := f.heading(i); ok {
			a := slug(title)
			if n := count[a]; n > 0 {
				out[a+"-"+itoa(n)] = true
			} else {
				out[a] = true
			}
			count[a]++
		}
		for _, m := range htmlAnchor.FindAllStringSubmatch(f.lines[i], -1) {
			out[m[1]] = true
		}
	}
	return out
}

var htmlAnchor = regexp.MustCompile(`<a\s+(?:name|id)="([^"]+)"`)

// slug is GitHub's anchor for a heading: lower case, markup and
// punctuation other than '-' and '_' dropped, spaces to '-'.
func slug(title string) string {
	title = codeSpan.ReplaceAllString(title, "$1")
	title = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`).ReplaceAllString(title, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(title) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var d []byte
	for ; n > 0; n /= 10 {
		d = append([]byte{byte('0' + n%10)}, d...)
	}
	return string(d)
}
