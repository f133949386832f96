// Package sink is Tidemark's Kafka stage: topic creation, producing units (idempotent or
// transactional), acknowledgements back to the watermark tracker, and reading the watermark
// topic at start-up. It uses franz-go (kgo, kadm).
//
// Inputs: *change.Unit values from a channel (Run), in the order the pipeline wants them
// published. Outputs: Kafka records, one per change.Record (a record with Partition
// AllPartitions becomes one copy per partition of its topic), and calls of the Acker it is
// given, the owner of the watermark records (in the pipeline, its owner goroutine), which say
// which units are durable and return the records that cover them, as data. The sink calls nothing back:
// it waits only for the answer of Acker.Produced or Acker.Durable. Once a unit is durable the sink
// returns its Claim to the budget of the stage that made it.
//
// Run gathers units into batches: a batch opens with the first unit after an idle spell and
// stays open for at most Config.Linger or until it holds Config.MaxBatchBytes. Records are
// produced as the units arrive; when the batch closes the producer is flushed, every record's
// outcome is checked, and Acker.Durable gets the batch's units in order together with
// the next offset of every partition produced to so far. The records of its reply are produced
// in the same batch, flushed, and then Acker.Committed follows. While no unit arrives, an
// Acker.Durable without units is called every Config.Tick, so heartbeats flow.
//
// Guarantees:
//   - The producer is idempotent with acks=all; per partition, records land in the order the
//     units carried them. A keyed record with AnyPartition goes where Kafka's Java client
//     would put it (murmur2 of the key), so consumers in any language agree; a keyless one
//     sticks to a partition until that partition's batch fills.
//   - At-least-once: AckDurable is sent only after every record of its units is acknowledged,
//     so a watermark produced from it never covers a record Kafka does not hold. A restart may
//     produce some records again.
//   - Exactly-once (the default): each batch is one Kafka transaction holding whole units and
//     the records of the replies for them (watermarks and position checkpoints). AckDurable is
//     sent after Flush, while the transaction is still open; AckCommitted after it commits. A
//     read-committed consumer sees all of a batch or none of it. Any produce, flush or commit
//     error aborts the transaction and ends Run. A second instance with the same
//     transactional id fences this one: Run then fails with an error matching ErrFenced.
//   - Units are never split across batches. A unit larger than MaxBatchBytes forms a batch of
//     its own.
//   - Large transactions: the replication stage hands a PostgreSQL transaction past its piece
//     bound over as several units (change.Piece), so its pieces spread over several batches,
//     each one bounded by MaxBatchBytes and Linger like any other, and no Kafka transaction
//     grows with the PostgreSQL one (nor comes near Config.TransactionTimeout). The first
//     piece of a transaction always opens a new batch: the batches before it hold none of its
//     records, so the watermarks written for them cover no part of it. The owner keeps
//     the rest (no watermark while a transaction is partly durable, checkpoints naming the
//     durable part); the sink treats pieces as units.
//
// Record size: one record (one row change: key, value and headers) may be up to MaxRecordBytes
// (16 MiB). The main producer builds record batches of up to 1 MiB: franz-go writes each produce
// request into a pooled buffer that grows by doubling, and batches of 16 MiB made it regrow for
// every request. In franz-go the batch limit is also the largest record a client takes, so a
// batch whose units hold a record above about 1 MiB goes through a second producer, with record
// batches of up to MaxRecordBytes and (exactly-once) a transactional id of its own,
// TransactionalID + LargeTransactionalIDSuffix. A batch uses one producer from start to commit:
// a unit with such a record closes the batch before it and opens one of its own on the large
// producer (which may take smaller units after it), so every batch is still one transaction,
// batches commit one after another, and per-partition order holds. Init initialises both
// producers, so a new instance fences both ids and resolves the open transactions of both.
// EnsureTopics creates every topic with max.message.bytes=MaxRecordBytes, overriding the
// broker's default of 1 MiB. A topic
// that already existed keeps its own max.message.bytes (EnsureTopics logs a warning when it is
// smaller); raise it with kafka-configs.sh --alter --add-config max.message.bytes=16777216.
// Consumers need nothing special: fetch limits are not absolute, a broker always returns at
// least one whole batch. A record larger than MaxRecordBytes fails with MESSAGE_TOO_LARGE and
// ends Run like any produce error; the caller must keep such a record out (see MaxRecordBytes).
//
// Reading back: ReadWatermarks and ScanTopic (the reconcile scan) hand records to a function as
// they arrive and keep none. A record larger than MaxRecordBytes, or one the function refuses,
// stops the read with a *RecordError naming topic, partition and offset; a fetched batch may
// decompress to at most 4 x MaxRecordBytes.
//
// Memory: Run holds at most MaxBatchBytes of units (plus the unit that crosses the bound, and a
// first piece waiting for the next batch) beyond what the kgo client buffers, and Produce blocks while the client holds its maximum
// buffered bytes, which backpressures the input channel.
package sink
