import Kafka

/// What the partition ledger tells of the partitions, for commits, the revoke and the workers.
extension PipelineState {
    /// Offsets that advanced since the last commit, by partition.
    public func offsetsToCommit() -> [TopicPartitionOffset] { ledger.offsetsToCommit() }

    /// What finished on partitions being revoked, to commit before the revoke waits for the
    /// work under way: a member dropped from the group while it waits cannot commit any more.
    public func offsetsToCommit(revoking revoked: [TopicPartition]) -> [TopicPartitionOffset] {
        ledger.offsetsToCommit(revoking: revoked)
    }

    public func workUnderWay(in partitions: [TopicPartition]) -> Int {
        ledger.workUnderWay(in: partitions)
    }

    /// Whether work on the record should go on: its partition is assigned under the same
    /// generation and not being revoked.
    public func owns(_ source: RecordSource) -> Bool { ledger.owns(source) }
}
