package integration

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"os"
	"path/filepath"
	"time"
)

// A copied initdb template would give every cluster of a test process the
// same system identifier, which is what tells PostgreSQL clusters apart
// (pgreplica keys its process watermark and Session positions by it): to
// the driver they would all be one cluster. newSystemIdentifier gives a
// copy an identifier of its own, as initdb would have, by rewriting the two
// places a stopped, cleanly shut down data directory keeps it:
//
//   - global/pg_control: ControlFileData starts with system_identifier
//     (uint64, host byte order) and carries a CRC-32C of the bytes before
//     its crc field;
//   - the long header of the first page of every WAL segment: xlp_sysid at
//     byte 24 (page headers are not covered by a CRC; records are).
//
// Both layouts are the same in every supported major version.
func newSystemIdentifier(data string) (uint64, error) {
	ctlPath := filepath.Join(data, "global", "pg_control")
	ctl, err := os.ReadFile(ctlPath)
	if err != nil {
		return 0, err
	}
	crcAt := controlCRCOffset(ctl)
	if crcAt < 0 {
		return 0, errors.New("pg_control: no CRC found")
	}
	old := binary.LittleEndian.Uint64(ctl[:8])
	// initdb's recipe: seconds, microseconds and a few random bits.
	now := time.Now()
	id := uint64(now.Unix())<<32 | uint64(now.Nanosecond()/1000)<<12 | uint64(rand.IntN(1<<12))
	if id == old {
		id++
	}

	segs, err := filepath.Glob(filepath.Join(data, "pg_wal", "[0-9A-F]*"))
	if err != nil {
		return 0, err
	}
	for _, seg := range segs {
		if len(filepath.Base(seg)) != 24 { // a segment, not a .history or .partial
			continue
		}
		if err := patchUint64(seg, 24, old, id); err != nil {
			return 0, fmt.Errorf("%s: %w", filepath.Base(seg), err)
		}
	}
	binary.LittleEndian.PutUint64(ctl[:8], id)
	binary.LittleEndian.PutUint32(ctl[crcAt:], crc32.Checksum(ctl[:crcAt], crc32.MakeTable(crc32.Castagnoli)))
	return id, os.WriteFile(ctlPath, ctl, 0o600)
}

// controlCRCOffset finds the crc field of ControlFileData: the first
// 4-aligned offset whose stored value is the CRC-32C of everything before
// it (-1 if none).
func controlCRCOffset(ctl []byte) int {
	table := crc32.MakeTable(crc32.Castagnoli)
	for off := 8; off+4 <= min(len(ctl), 1024); off += 4 {
		if binary.LittleEndian.Uint32(ctl[off:]) == crc32.Checksum(ctl[:off], table) {
			return off
		}
	}
	return -1
}

// patchUint64 replaces the little-endian uint64 at off in file, which must
// hold old there.
func patchUint64(file string, off int64, old, v uint64) error {
	f, err := os.OpenFile(file, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	var b [8]byte
	if _, err := f.ReadAt(b[:], off); err != nil {
		return err
	}
	if got := binary.LittleEndian.Uint64(b[:]); got != old {
		return fmt.Errorf("system identifier %d in the WAL page header, %d in pg_control", got, old)
	}
	binary.LittleEndian.PutUint64(b[:], v)
	_, err = f.WriteAt(b[:], off)
	return err
}
