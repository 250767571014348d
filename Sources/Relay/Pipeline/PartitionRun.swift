import Kafka

/// Counts a chunk's records per partition. They come in runs of a partition (a fetch's
/// records), so the table is written once per run instead of hashing the partition for each
/// record.
struct PartitionRun {
    private var partition: TopicPartition?
    private var count = 0

    mutating func count(_ recordPartition: TopicPartition, into taken: inout RecordsTakenIn) {
        if recordPartition != partition {
            end(into: &taken)
            partition = recordPartition
        }
        count += 1
    }

    mutating func end(into taken: inout RecordsTakenIn) {
        guard let partition, count > 0 else { return }
        taken.perPartition[partition, default: 0] += count
        count = 0
    }
}
