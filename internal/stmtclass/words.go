package stmtclass

// The words the rules know: keywords, functions with effects, and the
// ASCII case folding PostgreSQL applies to unquoted identifiers.

// kw identifies the few keywords the rules look at.
type kw uint8

const (
	kwNone  kw = iota
	kwOther    // a statement that starts with something we do not name
	kwAll
	kwAlter
	kwAnalyze // ANALYZE or ANALYSE
	kwBegin
	kwConstraints
	kwCreate
	kwDeallocate
	kwDeclare
	kwDelete
	kwDiscard
	kwDo
	kwExecute
	kwExplain
	kwFor
	kwGlobal
	kwHold
	kwInsert
	kwInto
	kwKey
	kwListen
	kwLoad
	kwLocal
	kwMerge
	kwNo
	kwOr
	kwPgTemp
	kwPrepare
	kwReplace
	kwReset
	kwSelect
	kwSet
	kwShare
	kwShow
	kwStart
	kwSyncCommit // synchronous_commit
	kwTable
	kwTemp // TEMP or TEMPORARY
	kwTransaction
	kwTrue
	kwUnlisten
	kwUpdate
	kwValues
	kwVerbose
	kwWith
)

// keyword maps an unquoted identifier to a kw, case-insensitively.
func keyword(s string) kw {
	if len(s) < 2 || len(s) > len("synchronous_commit") {
		return kwNone
	}
	switch s[0] | 0x20 {
	case 'a':
		switch {
		case eqFold(s, "all"):
			return kwAll
		case eqFold(s, "alter"):
			return kwAlter
		case eqFold(s, "analyze"), eqFold(s, "analyse"):
			return kwAnalyze
		}
	case 'b':
		if eqFold(s, "begin") {
			return kwBegin
		}
	case 'c':
		switch {
		case eqFold(s, "create"):
			return kwCreate
		case eqFold(s, "constraints"):
			return kwConstraints
		}
	case 'd':
		switch {
		case eqFold(s, "do"):
			return kwDo
		case eqFold(s, "delete"):
			return kwDelete
		case eqFold(s, "declare"):
			return kwDeclare
		case eqFold(s, "discard"):
			return kwDiscard
		case eqFold(s, "deallocate"):
			return kwDeallocate
		}
	case 'e':
		switch {
		case eqFold(s, "explain"):
			return kwExplain
		case eqFold(s, "execute"):
			return kwExecute
		}
	case 'f':
		if eqFold(s, "for") {
			return kwFor
		}
	case 'g':
		if eqFold(s, "global") {
			return kwGlobal
		}
	case 'h':
		if eqFold(s, "hold") {
			return kwHold
		}
	case 'i':
		switch {
		case eqFold(s, "into"):
			return kwInto
		case eqFold(s, "insert"):
			return kwInsert
		}
	case 'k':
		if eqFold(s, "key") {
			return kwKey
		}
	case 'l':
		switch {
		case eqFold(s, "local"):
			return kwLocal
		case eqFold(s, "load"):
			return kwLoad
		case eqFold(s, "listen"):
			return kwListen
		}
	case 'm':
		if eqFold(s, "merge") {
			return kwMerge
		}
	case 'n':
		if eqFold(s, "no") {
			return kwNo
		}
	case 'o':
		if eqFold(s, "or") {
			return kwOr
		}
	case 'p':
		switch {
		case eqFold(s, "pg_temp"):
			return kwPgTemp
		case eqFold(s, "prepare"):
			return kwPrepare
		}
	case 'r':
		switch {
		case eqFold(s, "reset"):
			return kwReset
		case eqFold(s, "replace"):
			return kwReplace
		}
	case 's':
		switch {
		case eqFold(s, "select"):
			return kwSelect
		case eqFold(s, "set"):
			return kwSet
		case eqFold(s, "show"):
			return kwShow
		case eqFold(s, "share"):
			return kwShare
		case eqFold(s, "start"):
			return kwStart
		case eqFold(s, "synchronous_commit"):
			return kwSyncCommit
		}
	case 't':
		switch {
		case eqFold(s, "table"):
			return kwTable
		case eqFold(s, "temp"), eqFold(s, "temporary"):
			return kwTemp
		case eqFold(s, "true"):
			return kwTrue
		case eqFold(s, "transaction"):
			return kwTransaction
		}
	case 'u':
		switch {
		case eqFold(s, "update"):
			return kwUpdate
		case eqFold(s, "unlisten"):
			return kwUnlisten
		}
	case 'v':
		switch {
		case eqFold(s, "values"):
			return kwValues
		case eqFold(s, "verbose"):
			return kwVerbose
		}
	case 'w':
		if eqFold(s, "with") {
			return kwWith
		}
	}
	return kwNone
}

// quotedKeyword maps the quoted identifiers that matter anyway: a quoted
// schema or setting name means the same thing as the unquoted one.
func quotedKeyword(s string) kw {
	switch {
	case eqFold(s, "pg_temp"):
		return kwPgTemp
	case eqFold(s, "synchronous_commit"):
		return kwSyncCommit
	}
	return kwNone
}

// What calling a function means for routing.
const (
	fnWrite     uint8 = 1 << iota // not a read: side effect, or fails on a standby
	fnSession                     // leaves session state behind (pin the conn)
	fnSetConfig                   // set_config: look at the arguments
)

// funcEffect looks up a function name (the last part of a possibly
// schema-qualified name). Unknown functions are reads: a standby rejects
// a write with 25006 and the router retries on the primary. The list holds
// functions that would succeed on a standby but act on the wrong session or
// server (advisory locks, set_config, currval, pg_cancel_backend, …), and
// ones that fail there with an error other than 25006.
func funcEffect(name string) uint8 {
	if len(name) < 6 {
		return 0
	}
	switch name[0] | 0x20 {
	case 'c':
		if eqFold(name, "currval") {
			return fnWrite
		}
	case 'd':
		switch {
		case eqFold(name, "dblink_exec"):
			return fnWrite
		case hasPrefixFold(name, "dblink_connect"):
			return fnWrite | fnSession // a named connection lives in the session
		}
	case 'l':
		switch {
		case hasPrefixFold(name, "lo_"), eqFold(name, "loread"), eqFold(name, "lowrite"):
			return fnWrite // large objects
		case eqFold(name, "lastval"):
			return fnWrite
		}
	case 'n':
		if eqFold(name, "nextval") {
			return fnWrite
		}
	case 's':
		switch {
		case eqFold(name, "setval"):
			return fnWrite
		case eqFold(name, "set_config"):
			return fnWrite | fnSetConfig
		case eqFold(name, "setseed"):
			return fnWrite | fnSession // random() then depends on the session
		}
	case 't':
		if eqFold(name, "txid_current") || eqFold(name, "txid_current_if_assigned") {
			return fnWrite
		}
	case 'p':
		if !hasPrefixFold(name, "pg_") {
			return 0
		}
		rest := name[3:]
		switch {
		case hasPrefixFold(rest, "advisory_"), hasPrefixFold(rest, "try_advisory_"):
			if containsFold(rest, "_xact") {
				return fnWrite // released at transaction end
			}
			return fnWrite | fnSession
		case hasPrefixFold(rest, "replication_origin_session_"):
			return fnWrite | fnSession
		case hasPrefixFold(rest, "current_xact_id"),
			hasPrefixFold(rest, "current_wal_"),
			hasPrefixFold(rest, "stat_reset"),
			hasPrefixFold(rest, "logical_slot_get_"), // consumes changes
			hasPrefixFold(rest, "replication_origin_"),
			containsFold(rest, "replication_slot"),
			eqFold(rest, "notify"),
			eqFold(rest, "switch_wal"),
			eqFold(rest, "create_restore_point"),
			eqFold(rest, "logical_emit_message"),
			eqFold(rest, "terminate_backend"),
			eqFold(rest, "cancel_backend"),
			eqFold(rest, "reload_conf"),
			eqFold(rest, "rotate_logfile"),
			eqFold(rest, "promote"):
			return fnWrite
		}
	}
	return 0
}

// eqFold reports whether s equals lower, an ASCII lower-case word, ignoring
// ASCII case in s.
func eqFold(s, lower string) bool {
	if len(s) != len(lower) {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c-'A' < 26 {
			c += 'a' - 'A'
		}
		if c != lower[i] {
			return false
		}
	}
	return true
}

func hasPrefixFold(s, lower string) bool {
	return len(s) >= len(lower) && eqFold(s[:len(lower)], lower)
}

func containsFold(s, lower string) bool {
	for i := 0; i+len(lower) <= len(s); i++ {
		if eqFold(s[i:i+len(lower)], lower) {
			return true
		}
	}
	return false
}
