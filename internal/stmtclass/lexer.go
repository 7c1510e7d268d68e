package stmtclass

import "strings"

// tokKind is what the rules need to know of a token.
type tokKind uint8

const (
	tkEOF    tokKind = iota
	tkIdent          // unquoted identifier or keyword
	tkQIdent         // "quoted identifier"; text is between the quotes
	tkString         // '…', E'…' or $tag$…$tag$; text is the body as written
	tkNumber
	tkParam // $1
	tkLParen
	tkRParen
	tkSemi
	tkComma
	tkDot
	tkOp // any other operator or punctuation character
)

type sqlToken struct {
	kind tokKind
	esc  bool   // an E'…' string: text holds backslash escapes
	text string // a substring of the query, never a copy
}

// sqlLexer splits SQL into tokens the way PostgreSQL's scanner (scan.l)
// does, as far as routing needs: comments are skipped (and searched for
// hints), strings and quoted identifiers become single tokens.
type sqlLexer struct {
	s    string
	i    int
	hint Hint
	bad  bool // unterminated string, quoted identifier or comment
}

// Byte classes, after scan.l: any byte >= 0x80 is a letter (multi-byte
// UTF-8 identifiers), and '$' may continue an identifier, so "a$$b" is one
// identifier, not a dollar quote.
const (
	ccSpace      = 1 << iota // space \t \n \r \f \v
	ccIdentStart             // ident_start: letter, '_', >= 0x80
	ccIdentCont              // ident_cont: ident_start, digit, '$'
	ccDigit
)

var charClass = func() (t [256]uint8) {
	for _, c := range []byte(" \t\n\r\f\v") {
		t[c] = ccSpace
	}
	for c := 0; c < 256; c++ {
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' || c >= 0x80 {
			t[c] = ccIdentStart | ccIdentCont
		}
	}
	for c := '0'; c <= '9'; c++ {
		t[c] = ccDigit | ccIdentCont
	}
	t['$'] = ccIdentCont
	return t
}()

func isSpace(c byte) bool      { return charClass[c]&ccSpace != 0 }
func isIdentStart(c byte) bool { return charClass[c]&ccIdentStart != 0 }
func isIdentCont(c byte) bool  { return charClass[c]&ccIdentCont != 0 }
func isDigit(c byte) bool      { return charClass[c]&ccDigit != 0 }

func (l *sqlLexer) next() sqlToken {
	s := l.s
	for l.i < len(s) {
		c := s[l.i]
		switch {
		case isSpace(c):
			l.i++
		case c == '-' && l.i+1 < len(s) && s[l.i+1] == '-':
			// A -- comment runs to the end of the line (\n or \r).
			start := l.i + 2
			end := start
			for end < len(s) && s[end] != '\n' && s[end] != '\r' {
				end++
			}
			l.scanHint(s[start:end])
			l.i = end
		case c == '/' && l.i+1 < len(s) && s[l.i+1] == '*':
			l.blockComment()
		default:
			return l.scanToken()
		}
	}
	return sqlToken{kind: tkEOF}
}

// blockComment skips a /* */ comment; PostgreSQL nests them.
func (l *sqlLexer) blockComment() {
	s := l.s
	start := l.i
	depth := 0
	i := l.i
	for i < len(s) {
		if s[i] == '/' && i+1 < len(s) && s[i+1] == '*' {
			depth++
			i += 2
			continue
		}
		if s[i] == '*' && i+1 < len(s) && s[i+1] == '/' {
			depth--
			i += 2
			if depth == 0 {
				l.scanHint(s[start+2 : i-2])
				l.i = i
				return
			}
			continue
		}
		i++
	}
	l.bad = true
	l.i = len(s)
}

// scanHint looks for "pgreplica:primary" or "pgreplica:replica" in a
// comment body, case-insensitively, with optional spaces around the colon.
// If both appear, primary wins: it is always correct.
func (l *sqlLexer) scanHint(body string) {
	const tag = "pgreplica"
	for i := 0; i+len(tag) < len(body); i++ {
		if body[i]|0x20 != 'p' || !hasPrefixFold(body[i:], tag) || (i > 0 && isIdentCont(body[i-1])) {
			continue
		}
		j := i + len(tag)
		for j < len(body) && isSpace(body[j]) {
			j++
		}
		if j >= len(body) || body[j] != ':' {
			continue
		}
		j++
		for j < len(body) && isSpace(body[j]) {
			j++
		}
		w := body[j:]
		for k := 0; k < len(w); k++ {
			if !isIdentCont(w[k]) {
				w = w[:k]
				break
			}
		}
		switch {
		case eqFold(w, "primary"):
			l.hint = HintPrimary
		case eqFold(w, "replica"):
			if l.hint == HintNone {
				l.hint = HintReplica
			}
		}
	}
}

func (l *sqlLexer) scanToken() sqlToken {
	s := l.s
	start := l.i
	c := s[start]
	switch {
	case c == '\'':
		return l.quoted(start, false)
	case isIdentStart(c):
		i := start + 1
		for i < len(s) && isIdentCont(s[i]) {
			i++
		}
		if i == start+1 && c|0x20 == 'e' && i < len(s) && s[i] == '\'' {
			l.i = i
			return l.quoted(i, true)
		}
		l.i = i
		return sqlToken{kind: tkIdent, text: s[start:i]}
	case c == '"':
		for i := start + 1; i < len(s); i++ {
			if s[i] != '"' {
				continue
			}
			if i+1 < len(s) && s[i+1] == '"' { // "" is an escaped quote
				i++
				continue
			}
			l.i = i + 1
			return sqlToken{kind: tkQIdent, text: s[start+1 : i]}
		}
		l.bad = true
		l.i = len(s)
		return sqlToken{kind: tkQIdent, text: s[start+1:]}
	case c == '$':
		return l.dollar(start)
	case isDigit(c) || (c == '.' && start+1 < len(s) && isDigit(s[start+1])):
		l.i = l.number(start)
		return sqlToken{kind: tkNumber, text: s[start:l.i]}
	}
	l.i = start + 1
	k := tkOp
	switch c {
	case '(':
		k = tkLParen
	case ')':
		k = tkRParen
	case ';':
		k = tkSemi
	case ',':
		k = tkComma
	case '.':
		k = tkDot
	}
	return sqlToken{kind: k, text: s[start:l.i]}
}

// quoted lexes a string literal whose opening quote is at s[q]. In an
// E'…' string a backslash escapes the next byte; in both kinds a doubled
// quote stands for one.
func (l *sqlLexer) quoted(q int, esc bool) sqlToken {
	s := l.s
	for i := q + 1; i < len(s); i++ {
		switch s[i] {
		case '\\':
			if esc {
				i++
			}
		case '\'':
			if i+1 < len(s) && s[i+1] == '\'' {
				i++
				continue
			}
			l.i = i + 1
			return sqlToken{kind: tkString, esc: esc, text: s[q+1 : i]}
		}
	}
	l.bad = true
	l.i = len(s)
	return sqlToken{kind: tkString, esc: esc, text: s[q+1:]}
}

// dollar lexes what starts with '$' at s[start]: a parameter ($1), a
// dollar-quoted string ($$…$$ or $tag$…$tag$), or a lone '$'.
func (l *sqlLexer) dollar(start int) sqlToken {
	s := l.s
	i := start + 1
	if i < len(s) && isDigit(s[i]) {
		for i < len(s) && isDigit(s[i]) {
			i++
		}
		l.i = i
		return sqlToken{kind: tkParam, text: s[start:i]}
	}
	// A tag is an identifier without '$' (scan.l's dolq_start, dolq_cont).
	if i < len(s) && isIdentStart(s[i]) {
		i++
		for i < len(s) && (isIdentStart(s[i]) || isDigit(s[i])) {
			i++
		}
	}
	if i >= len(s) || s[i] != '$' {
		l.i = start + 1
		return sqlToken{kind: tkOp, text: s[start : start+1]}
	}
	delim := s[start : i+1]
	body := i + 1
	j := strings.Index(s[body:], delim)
	if j < 0 {
		l.bad = true
		l.i = len(s)
		return sqlToken{kind: tkString, text: s[body:]}
	}
	l.i = body + j + len(delim)
	return sqlToken{kind: tkString, text: s[body : body+j]}
}

// number returns the end of a numeric literal starting at s[i]. It stops
// before trailing letters, as PostgreSQL before 15 did ("1into" lexed as 1
// INTO); newer servers reject such input, so splitting is the safe reading.
func (l *sqlLexer) number(i int) int {
	s := l.s
	if s[i] == '0' && i+2 < len(s) && (s[i+1]|0x20 == 'x' || s[i+1]|0x20 == 'o' || s[i+1]|0x20 == 'b') {
		i += 2
		for i < len(s) && (isDigit(s[i]) || s[i]|0x20-'a' < 6 || s[i] == '_') {
			i++
		}
		return i
	}
	for i < len(s) && (isDigit(s[i]) || s[i] == '_') {
		i++
	}
	if i < len(s) && s[i] == '.' && !(i+1 < len(s) && s[i+1] == '.') {
		i++
		for i < len(s) && (isDigit(s[i]) || s[i] == '_') {
			i++
		}
	}
	if i+1 < len(s) && s[i]|0x20 == 'e' {
		j := i + 1
		if s[j] == '+' || s[j] == '-' {
			j++
		}
		if j < len(s) && isDigit(s[j]) {
			for j < len(s) && isDigit(s[j]) {
				j++
			}
			i = j
		}
	}
	return i
}
