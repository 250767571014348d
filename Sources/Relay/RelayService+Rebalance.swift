import Kafka
import Logging

/// The consumer and what a rebalance asks of the relay: an assignment starts the partitions'
/// lanes; a revoke stops new work on its partitions, commits what finished, waits for the
/// requests under way and hands the final offsets to librdkafka.
extension RelayService {
    func makeConsumer() throws(KafkaError) -> KafkaConsumer {
        var kafka = configuration.kafka
        kafka["group.id"] = configuration.group
        let (statistics, logger) = (self.statistics, self.logger)
        return try KafkaConsumer(configuration: kafka, topics: [configuration.topic], logger: logger,
                                 readsHeaders: configuration.inputMapping?.readsHeaders ?? false) { [self] event in
            switch event {
            case .assigned(let partitions, let generation):
                gauges.track(partitions)
                driver.assign(partitions, generation: generation)
                health.recordJoinedGroup()
                return []
            case .revoked(let partitions, let lost):
                if lost { health.recordMembershipLost() }
                let finished = driver.beginRevoke(partitions)
                if !lost {
                    commit(finished)
                    waitForWorkUnderWay(in: partitions)
                }
                let finalOffsets = driver.finishRevoke(partitions)
                gauges.untrack(partitions)
                return finalOffsets
            }
        } committedOnRevoke: { offsets in
            statistics.commits.add(1, ordering: .relaxed)
            logger.info("Committed before revoke: \(offsets.map(\.description).joined(separator: ", "))")
        } consumeError: { [self] error in
            noteConsumeError(error)
        } statistics: { [gauges] figures in
            gauges.record(figures)
        }
    }

    /// Runs on the poll thread inside the revoke callback, before it waits for the work under
    /// way: what finished is committed now, so that a wait long enough to get this member
    /// dropped from the group (its final commit then refused) costs the next owner only the
    /// records that were under way.
    private func commit(_ offsets: [TopicPartitionOffset]) {
        guard !offsets.isEmpty, let consumer = consumerState.withLock({ $0 }) else { return }
        if let failure = consumer.commitDuringRevoke(offsets) {
            logger.warning("Commit at the start of a revoke failed (\(failure)); committing again once the work under way ended")
        } else {
            driver.committedDuringRevoke(offsets)
            statistics.commits.add(1, ordering: .relaxed)
        }
    }

    /// Runs on the poll thread inside the revoke callback, after new work on the partitions
    /// stopped: waits until the requests under way on them were answered (or timed out) and
    /// dead-letter writes under way finished, up to `revokeDrainTimeout`, so that what finished
    /// is committed before another member takes over and no request of this member can land
    /// after the next owner's. Nothing is cancelled: a cancelled update may still be applied by
    /// Fleet Engine, after the next owner's newer fix. Queued records stay uncommitted for it.
    private func waitForWorkUnderWay(in partitions: [TopicPartition]) {
        guard pipelineRun.phase != .ended else { return }  // shutdown abandoned the work under way
        let started = ContinuousClock.now
        let left = driver.waitUntilIdle(partitions, timeout: configuration.revokeDrainTimeout)
        revokeWait.recordNanoseconds((ContinuousClock.now - started).nanoseconds)
        if left > 0, pipelineRun.phase != .ended {
            logger.warning("Revoke: \(left) requests still under way after \(configuration.revokeDrainTimeout); their records stay uncommitted")
        }
    }

    /// Kafka answered an error instead of records: counted, reflected in readiness, and logged
    /// at most a few times per interval (it can repeat on every poll).
    private func noteConsumeError(_ error: String) {
        statistics.recordConsumeError(error)
        health.recordConsumeError(error)
        logLimiter.warning("consume error", to: logger, "Kafka consume error: \(error)")
    }
}
