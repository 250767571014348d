/// One past the last record handed over, per partition: where its fetching resumes after a
/// pause. A consumer hands these to `RDKafkaClient.resume`, whose seek there wakes librdkafka's
/// fetcher at once. Forgotten when the partition's assignment changes: a position belongs to
/// the records read under one assignment.
struct FetchPositions {
    private(set) var next: [TopicPartition: Int64] = [:]

    /// A chunk holds each partition's records in order, mostly in runs: the last of each run
    /// sets its partition's position, when it was read under the partition's current assignment
    /// (`currentGeneration`). A chunk polled across a rebalance may end with records of an
    /// assignment revoked meanwhile: seeking the partition's new assignment there would skip
    /// what it must read again.
    mutating func note(_ chunk: [KafkaRecord], currentGeneration: (TopicPartition) -> UInt64) {
        for index in chunk.indices {
            let record = chunk[index]
            let isLastOfRun = index == chunk.index(before: chunk.endIndex)
                || chunk[index + 1].partition != record.partition || chunk[index + 1].topic != record.topic
            guard isLastOfRun else { continue }
            let partition = record.topicPartition
            if record.assignmentGeneration == currentGeneration(partition) { next[partition] = record.offset + 1 }
        }
    }

    mutating func forget(_ partitions: some Sequence<TopicPartition>) {
        for partition in partitions { next[partition] = nil }
    }

    mutating func forgetAll() {
        next = [:]
    }
}
