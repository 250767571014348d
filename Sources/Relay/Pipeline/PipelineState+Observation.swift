import Kafka

/// What the relay reads of the pipeline's state for figures, gauges and progress.
extension PipelineState {
    /// Attempts that may be under way now (the adaptive limit, else unbounded).
    public var concurrencyLimit: Int? { pacing.limit }
    public var unfinishedRecords: Int { ledger.unfinishedRecords }
    /// Vehicles waiting to retry after a Fleet Engine failure (not a signer failure).
    public var vehiclesFailing: Int { vehicles.vehiclesFailing }
    public var assignedPartitions: [TopicPartition] { ledger.assignedPartitions }
    public var pauseWish: Set<TopicPartition> { ledger.pauseWish }
    public var unfinishedPerPartition: [TopicPartition: Int] { ledger.unfinishedPerPartition }
    public var uncommittedRecords: Int64 { ledger.uncommittedRecords }
    public var lastCommittedOffsets: [TopicPartition: Int64] { ledger.lastCommittedOffsets }
    public var vehicleCount: Int { vehicles.vehicleCount }
    public var queuedFixes: Int { vehicles.queuedFixes }
    public var readyVehicles: Int { vehicles.readyVehicles }
    public var waitingWorkers: Int { waiters.count }

    public func oldestUnfinishedAge(now: ContinuousClock.Instant) -> [TopicPartition: Duration] {
        ledger.oldestUnfinishedAge(now: now)
    }
}
