// Package format is the interface between Tidemark's envelope layer (pkg/codec) and its record
// formats. A Format turns one table's changes into the bytes of its records' keys and values
// (NewEncoder gives a TableEncoder per table, which appends a record's value, key and the value
// of the format's own header, if any, into a buffer the caller owns: one dynamic call per record,
// never one per column value), and reads them back (the format's package has its decoder beside
// its encoder).
//
// What a change becomes (a key change is a delete, a tombstone and a create; a delete is
// followed by its tombstone; unchanged TOAST is resolved from the old tuple when it can be;
// headers) is decided above this interface, once for every format, by pkg/codec. A format only
// decides bytes: how a value, a row, the envelope and a key are written.
//
// The formats are listed in pkg/format/formats: json (pkg/format/json, the default) and
// json-with-schema (pkg/format/connectjson). A new format is a new package that implements
// Format, and one line in that list.
//
// The package also holds what every format shares: the type catalog (Types) that formats with
// schemas read user-defined types from, the errors a format returns (ValueError,
// ErrNotRepresentable), and AppendJSONString and AppendLSN, which headers use too.
package format
