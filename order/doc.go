// Package order is the schema of the events a producer publishes and the worker publishes back, what a
// producer in Go imports (it links no worker code):
//
//   - Order, the JSON payload of an entry of the orders stream: a reservation of one SKU, a basket of
//     several (Lines), or a cancel or fulfil event of an order placed before;
//   - Result, the outcome event of every processed order, in the results stream; its Status and Reason;
//   - Decode, the strict decoder and validator the worker reads every payload with (its errors wrap
//     ErrBadInput), and the input limits and checks it applies (MaxLines, MaxQuantity, ValidateSKU, ...);
//   - Partitions and PartitionOf: the streams of each partition, and the partition an order goes to
//     (crc32 of its RouteSKU), the same in every language.
//
// docs/formats.md describes the same formats for producers in other languages.
package order
