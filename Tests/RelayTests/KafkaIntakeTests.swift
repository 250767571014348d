@testable import Kafka
import Logging
import Synchronization
import Testing

/// The consumer's poll thread waits in librdkafka, woken by what concerns it, never polling
/// its own state at an interval. Here an idle poll waits a minute: whatever must take effect
/// sooner has to wake it.
@Suite struct KafkaIntakeTests {
    let logger = Logger(label: "intake-test")

    /// The partitions the rebalance callbacks handed over.
    final class Assignment: Sendable {
        let partitions = Mutex<Set<TopicPartition>>([])
    }

    func consumer(_ cluster: KafkaMockCluster, assigned: Assignment) throws -> KafkaConsumer {
        let configuration = KafkaConfiguration(bootstrapServers: cluster.bootstrapServers, extra: [
            "group.id": "intake", "session.timeout.ms": "6000", "heartbeat.interval.ms": "500",
            "statistics.interval.ms": "0",
        ])
        let consumer = try KafkaConsumer(configuration: configuration, topics: ["t"], logger: logger) { event in
            switch event {
            case .assigned(let partitions, _): assigned.partitions.withLock { $0.formUnion(partitions) }
            case .revoked(let partitions, _): assigned.partitions.withLock { $0.subtract(partitions) }
            }
            return []
        }
        consumer.idlePollMilliseconds.store(60_000, ordering: .relaxed)
        return consumer
    }

    /// The hand-over may ask for more while the yield that found it full is still returning: that
    /// ask must not be lost, or the poll thread would wait for the reader forever with every
    /// partition paused.
    @Test func anAskForMoreDuringAFullYieldIsNotLost() {
        let intake = ConsumerIntake()
        let mark = intake.demandMark
        intake.produceMore()
        intake.readerIsBehind(since: mark)
        #expect(intake.waitForDemand(timeout: .zero), "the reader asked after the yield began")
        intake.readerIsBehind(since: intake.demandMark)
        #expect(!intake.waitForDemand(timeout: .milliseconds(10)), "no ask since: the reader is behind")
        intake.produceMore()
        #expect(intake.waitForDemand(timeout: .zero))
    }

    @Test func aNewAssignmentAndEachPauseChangeWakeTheIdlePollThread() async throws {
        let cluster = try KafkaMockCluster(brokers: 1, logger: logger)
        try cluster.createTopic("t", partitions: 2)
        let (first, second) = (TopicPartition(topic: "t", partition: 0), TopicPartition(topic: "t", partition: 1))
        let assigned = Assignment()
        let consumer = try consumer(cluster, assigned: assigned)
        consumer.setPaused([first, second])
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await consumer.run() }
            try await eventually("both partitions are assigned", timeout: .seconds(60)) {
                assigned.partitions.withLock { $0 } == [first, second]
            }
            try await eventually("the wish is applied to the new assignment", timeout: .seconds(30)) {
                consumer.pausedPartitionCount == 2
            }
            consumer.setPaused([first])
            try await eventually("a resume takes effect", timeout: .seconds(30)) { consumer.pausedPartitionCount == 1 }
            consumer.setPaused([first, second])
            try await eventually("a pause takes effect", timeout: .seconds(30)) { consumer.pausedPartitionCount == 2 }
            await consumer.close()
            try await group.waitForAll()
        }
    }
}
