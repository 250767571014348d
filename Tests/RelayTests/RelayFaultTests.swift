import FleetAuth
import FleetEngine
import FleetModel
import Foundation
import JSON
import Kafka
import Logging
import OpsServer
import Prometheus
import Relay
import Synchronization
import Testing

/// Delivery guarantees under faults, against the mock cluster and the emulator.
/// Each test asserts that no event was lost (every fix time reached the emulator
/// as a last or past location), that no vehicle moved backwards, and that the
/// committed offsets reach the end of the topic.
extension IntegrationTests {
    @Suite struct RelayFaultTests {
        @Test func fivePercentUnavailableAndFivePercentThrottledOver20000Events() async throws {
            let (harness, generated) = try await RelayHarness.withBacklog(partitions: 4, vehicles: 1000, fixesPerVehicle: 20)
            harness.emulator.faultPlan = .init(failRate: 0.05, throttleRate: 0.05)

            let started = ContinuousClock.now
            let running = try harness.startRelay(group: "relay")
            try await eventually("every record is finished", timeout: .seconds(300)) {
                running.relay.statistics.snapshot.finished == 20_000
            }
            let drainTime = ContinuousClock.now - started
            try await running.stop()

            let totals = running.relay.statistics.snapshot
            let responses = harness.emulator.statistics.responsesByStatus
            #expect(harness.lostEvents(generated.events).isEmpty)
            #expect(harness.backwardsUpdates == 0)
            #expect(totals.deadLettered == 0)
            #expect((responses[503] ?? 0) > 0 && (responses[429] ?? 0) > 0)
            #expect(try await harness.committedToTheEnd(group: "relay"))
            print("fault figures: 20000 events, \(totals.requestsAccepted) requests accepted, 503×\(responses[503] ?? 0), 429×\(responses[429] ?? 0), retries \(totals.retries), drained in \(drainTime)")
            await harness.shutdown()
        }

        @Test func fleetEngineOutagePausesFetchingAndEverythingDrainsAfterwards() async throws {
            let (harness, generated) = try await RelayHarness.withBacklog(partitions: 4, vehicles: 500, fixesPerVehicle: 40)
            harness.emulator.goDown(for: .seconds(10))

            let cap = 2000
            let running = try harness.startRelay(group: "relay") { $0.maximumPendingRecords = cap }
            let sampler = Task { () -> (peak: Int, sawPause: Bool) in
                var (peak, sawPause) = (0, false)
                while !Task.isCancelled {
                    peak = max(peak, running.relay.pendingRecords)
                    sawPause = sawPause || running.relay.isPaused
                    try? await Task.sleep(for: .milliseconds(10))
                }
                return (peak, sawPause)
            }
            try await eventually("every record is finished", timeout: .seconds(300)) {
                running.relay.statistics.snapshot.finished == 20_000
            }
            sampler.cancel()
            let (peak, sawPause) = await sampler.value
            try await running.stop()

            // The cap, plus what each partition may still receive once it crossed its share
            // (a quarter of the cap here) before its pause takes effect: the chunk that crossed
            // it, the chunks buffered for the reader and one being polled.
            let inThePipe = (KafkaConsumer.maximumBufferedChunks + 2) * KafkaConsumer.maximumChunkSize
            let bound = cap + harness.partitions * inThePipe
            #expect(peak <= bound, "peak \(peak) records pending")
            #expect(sawPause)
            #expect((harness.emulator.statistics.responsesByStatus[503] ?? 0) > 0)
            #expect(harness.lostEvents(generated.events).isEmpty)
            #expect(harness.backwardsUpdates == 0)
            #expect(running.relay.statistics.snapshot.deadLettered == 0)
            #expect(try await harness.committedToTheEnd(group: "relay"))
            print("fault figures: outage 10 s, peak pending \(peak) (cap \(cap)), retries \(running.relay.statistics.snapshot.retries)")
            await harness.shutdown()
        }

        @Test func signerOutageHoldsRecordsWithoutDeadLetteringThem() async throws {
            let (harness, generated) = try await RelayHarness.withBacklog(partitions: 2, vehicles: 100, fixesPerVehicle: 10)
            let signer = FailingSigner(base: LocalKeySigner(key: harness.key), failFor: .seconds(10))

            let running = try harness.startRelay(group: "relay", signer: signer)
            try await eventually("every record is finished", timeout: .seconds(300)) {
                running.relay.statistics.snapshot.finished == 1000
            }
            try await running.stop()
            #expect(signer.failures.load(ordering: .relaxed) > 0)
            #expect(running.relay.statistics.snapshot.deadLettered == 0)
            #expect(harness.lostEvents(generated.events).isEmpty)
            #expect(harness.backwardsUpdates == 0)
            #expect(try await harness.committedToTheEnd(group: "relay"))
            await harness.shutdown()
        }
    }
}

extension IntegrationTests.RelayFaultTests {
    @Test func vehiclesWithCachedTokensKeepFlowingWhileTheSignerFailsForOthers() async throws {
        let harness = try await RelayHarness(partitions: 2)
        let signer = SwitchableSigner(base: LocalKeySigner(key: harness.key))
        // Two workers: fifty cold vehicles waiting for tokens would hold both if they waited in place.
        let running = try harness.startRelay(group: "relay", signer: signer) { $0.maximumInFlight = 2 }
        let warm = GeneratedEvents(vehicles: 5, fixesPerVehicle: 2, prefix: "warm-")
        try await harness.produce(warm.events.prefix(5).map(\.record))
        try await eventually("the warm vehicles hold tokens") { harness.emulator.vehicles.count == 5 }

        signer.failing.store(true, ordering: .relaxed)
        let cold = GeneratedEvents(vehicles: 50, fixesPerVehicle: 1, prefix: "cold-")
        try await harness.produce(cold.events.map(\.record) + warm.events.suffix(5).map(\.record))
        try await eventually("the warm vehicles' newer fixes arrive while the signer is down") {
            harness.lostEvents(warm.events).isEmpty
        }
        #expect(harness.emulator.vehicles.count == 5, "no cold vehicle can have been sent")
        #expect(signer.failures.load(ordering: .relaxed) >= 50)

        signer.failing.store(false, ordering: .relaxed)
        try await eventually("the cold vehicles follow once the signer is back") { harness.lostEvents(cold.events).isEmpty }
        try await eventually("offsets are committed to the end") { try await harness.committedToTheEnd(group: "relay") }
        try await running.stop()
        #expect(running.relay.statistics.snapshot.deadLettered == 0)
        #expect(harness.backwardsUpdates == 0)
        await harness.shutdown()
    }
}

/// A signer whose outage tests switch on and off.
final class SwitchableSigner: VehicleTokenSigner {
    let name = "switchable"
    let base: any VehicleTokenSigner
    let failing = Atomic<Bool>(false)
    let failures = Atomic<Int>(0)

    init(base: any VehicleTokenSigner) {
        self.base = base
    }

    func mint(for vehicle: VehicleIdentity) async throws -> VehicleToken {
        if failing.load(ordering: .relaxed) {
            failures.add(1, ordering: .relaxed)
            throw SignerError(signer: name, reason: .unavailable, "switched off")
        }
        return try await base.mint(for: vehicle)
    }
}

/// A signer that fails for a while after its first use, then recovers.
final class FailingSigner: VehicleTokenSigner {
    let name = "failing"
    let base: any VehicleTokenSigner
    let failFor: Duration
    let failures = Atomic<Int>(0)
    private let firstUse = Mutex<ContinuousClock.Instant?>(nil)

    struct Outage: Error {}

    init(base: any VehicleTokenSigner, failFor: Duration) {
        self.base = base
        self.failFor = failFor
    }

    func mint(for vehicle: VehicleIdentity) async throws -> VehicleToken {
        let start = firstUse.withLock { first in
            if first == nil { first = .now }
            return first!
        }
        if ContinuousClock.now < start + failFor {
            failures.add(1, ordering: .relaxed)
            throw Outage()
        }
        return try await base.mint(for: vehicle)
    }
}

extension IntegrationTests.RelayFaultTests {
    @Test func brokerDownAndCommitErrorsMidRunLoseNothing() async throws {
        let harness = try await RelayHarness(partitions: 4)
        // Broker 1 leads partitions 0 and 1, broker 2 the others; broker 3 coordinates the group.
        for partition in Int32(0)..<4 {
            harness.cluster.setPartitionLeader(harness.topic, partition: partition, brokerId: partition < 2 ? 1 : 2)
        }
        harness.cluster.setGroupCoordinator("relay", brokerId: 3)
        harness.emulator.faultPlan = .init(latency: .milliseconds(20))  // stretches the run over the faults
        let generated = GeneratedEvents(vehicles: 1000, fixesPerVehicle: 20)
        try await harness.produce(generated.events.map(\.record))
        let partitionOfVehicle = try await harness.partitionOfEachVehicle(records: generated.events.count)
        let onBroker1 = generated.events.filter { partitionOfVehicle[$0.vehicle]! < 2 }
        let onBroker2 = generated.events.filter { partitionOfVehicle[$0.vehicle]! >= 2 }

        let running = try harness.startRelay(group: "relay") { configuration in
            configuration.maximumInFlight = 8
            // Little read ahead, so that the outage stops work on broker 1's partitions.
            configuration.maximumPendingRecords = 200
            configuration.kafka["queued.max.messages.kbytes"] = "16"
            configuration.kafka["max.partition.fetch.bytes"] = "8192"
        }
        try await eventually("the relay is under way") { running.relay.statistics.snapshot.finished >= 2000 }
        harness.cluster.setBrokerDown(1)
        harness.cluster.failNextRequests(onBroker: 3, apiKey: 8, error: 16, count: 5)  // OffsetCommit → NOT_COORDINATOR
        try await eventually("broker 2's partitions are delivered and every commit error was answered",
                             timeout: .seconds(300)) {
            harness.lostEvents(onBroker2).isEmpty && harness.cluster.pendingRequestErrors(onBroker: 3, apiKey: 8) == 0
        }
        let stalledByTheOutage = harness.lostEvents(onBroker1).count
        // Without the outage both brokers' partitions advance together: a few dozen fixes wait.
        #expect(stalledByTheOutage >= onBroker1.count / 4, "the outage stopped broker 1's partitions mid-run")
        harness.cluster.setBrokerUp(1)

        try await harness.waitUntilEverythingIsDelivered(generated, group: "relay")
        try await running.stop()
        #expect(harness.backwardsUpdates == 0)
        #expect(running.relay.statistics.snapshot.deadLettered == 0)
        print("fault figures: broker 1 down until broker 2's partitions were done (\(stalledByTheOutage) of \(onBroker1.count) fixes on broker 1 waiting), 5 commit errors answered; 20000 events, duplicates \(harness.duplicateFixes)")
        await harness.shutdown()
    }

    @Test func groupMembershipChangingTwiceLosesNothingAndMovesNoVehicleBackwards() async throws {
        let (harness, generated) = try await RelayHarness.withBacklog(
            partitions: 6, vehicles: 1500, fixesPerVehicle: 20, latency: .milliseconds(10))
        func slow(_ configuration: inout RelayConfiguration) { configuration.maximumInFlight = 4 }

        let relays = try (0..<3).map { _ in try harness.startRelay(group: "relay", configure: slow) }
        func finished() -> Int { relays.reduce(0) { $0 + $1.relay.statistics.snapshot.finished } }
        try await eventually("the group is under way") { finished() >= 5000 }
        try await relays[1].stop()  // membership change 1: a member leaves
        try await eventually("the rest is under way") { finished() >= 15_000 }
        let joiner = try harness.startRelay(group: "relay", configure: slow)  // membership change 2: one joins
        try await harness.waitUntilEverythingIsDelivered(generated, group: "relay")
        for running in [relays[0], relays[2], joiner] { try await running.stop() }
        #expect(harness.backwardsUpdates == 0)
        print("fault figures: 3 members, one left, one joined; 30000 events, duplicates \(harness.duplicateFixes)")
        await harness.shutdown()
    }
}

extension IntegrationTests.RelayFaultTests {
    /// Partitions that move to a joining member are revoked from their owner, which commits
    /// what it finished before letting go, so the joiner starts there. Periodic commits are
    /// off, and so is the commit of a backlog worked off (a burst counts from a fifth of the
    /// 500,000 pending records allowed, more than the 30,000 of the backlog), so only a revoke
    /// can move these offsets. (With the cooperative assignor and one
    /// owner: the mock cluster refuses commits while a rebalance gathers its members, where a
    /// Kafka broker accepts them, and a second owner rejoining after its own revoke would start
    /// such a gathering while the first still commits. Even so the mock cluster sometimes has a
    /// rebalance under way when the owner's revoke begins and refuses its commit; the joiner
    /// then leaves and another joins, up to three times.)
    @Test func partitionsMovingToAJoiningMemberAreCommittedByTheirRevoke() async throws {
        let (harness, generated) = try await RelayHarness.withBacklog(
            partitions: 6, vehicles: 1500, fixesPerVehicle: 20, latency: .milliseconds(10))
        func configure(_ configuration: inout RelayConfiguration) {
            configuration.maximumInFlight = 4
            configuration.kafka["partition.assignment.strategy"] = "cooperative-sticky"
            configuration.commitInterval = .seconds(3600)
            configuration.maximumPendingRecords = 500_000
        }
        let owner = try harness.startRelay(group: "relay", configure: configure)
        try await eventually("the owner is under way on every partition", timeout: .seconds(240)) {
            owner.relay.assignedPartitions.count == 6 && owner.relay.statistics.snapshot.finished >= 10_000
        }
        var joiner: RelayHarness.RunningRelay?
        var committedMoved: [Int64] = []
        for attempt in 1...5 {
            let committedBefore = try await harness.committedOffsets(group: "relay")
            let joining = try harness.startRelay(group: "relay", configure: configure)
            try await eventually("the joiner took partitions over", timeout: .seconds(240)) {
                !joining.relay.assignedPartitions.isEmpty
            }
            let moved = joining.relay.assignedPartitions.map(\.partition)
            let committedAfter = try await harness.committedOffsets(group: "relay")
            // A revoke commits what was finished without a gap: a partition whose oldest record is
            // still queued has nothing to commit, so the check is over the moved partitions together.
            func offsets(_ committed: [Int32: Int64?]) -> [Int64] { moved.map { (committed[$0] ?? nil) ?? 0 } }
            #expect(zip(offsets(committedAfter), offsets(committedBefore)).allSatisfy { $0 >= $1 },
                    "a commit went back")
            if offsets(committedAfter).reduce(0, +) > offsets(committedBefore).reduce(0, +) {
                (joiner, committedMoved) = (joining, offsets(committedAfter))
                break
            }
            print("fault figures: attempt \(attempt): the mock cluster refused the revoke's commit; the joiner leaves")
            try await joining.stop()
            try await eventually("the owner owns every partition again", timeout: .seconds(240)) {
                owner.relay.assignedPartitions.count == 6
            }
        }
        #expect(joiner != nil, "the revoke committed what the owner had finished of the partitions it gave up")
        try await eventually("every event reached the emulator", timeout: .seconds(300)) {
            harness.lostEvents(generated.events).isEmpty
        }
        // Committing to the end is not checked: without periodic commits, a member stopping while
        // the other's leave is rebalancing the group cannot commit in the mock cluster.
        for running in [owner] + (joiner.map { [$0] } ?? []) { try await running.stop() }
        #expect(harness.backwardsUpdates == 0)
        print("fault figures: partitions moved to a joining member, committed at \(committedMoved); duplicates \(harness.duplicateFixes)")
        await harness.shutdown()
    }
}

extension IntegrationTests.RelayFaultTests {
    typealias RunningProcess = IntegrationTests.CommandLineTests.RunningProcess

    static func relayProcess(_ harness: RelayHarness, keyPath: String, extra: [String] = []) throws -> RunningProcess {
        try RunningProcess([
            "run", "--brokers", harness.cluster.bootstrapServers, "--topic", harness.topic, "--group", "cli",
            "--key-file", keyPath, "--fleet-engine-url", harness.emulatorURL, "--ca-file", harness.caFile, "--max-in-flight", "4",
            "--kafka-property", "session.timeout.ms=6000", "--log-level", "info", "--metrics-port", "0",
        ] + extra)
    }

    @Test func relayKilledMidRunAndRestartedLosesNothing() async throws {
        let (harness, generated) = try await RelayHarness.withBacklog(
            partitions: 4, vehicles: 1000, fixesPerVehicle: 10, latency: .milliseconds(5))
        let keyPath = harness.writeKeyFile()

        let first = try Self.relayProcess(harness, keyPath: keyPath)
        try await eventually("the first relay committed some offsets") {
            try await harness.committedOffsets(group: "cli").values.contains { ($0 ?? 0) > 0 }
        }
        kill(first.process.processIdentifier, SIGKILL)  // no graceful shutdown
        _ = await first.finish()
        let receivedBeforeRestart = harness.emulator.statistics.locationsReceived
        #expect(receivedBeforeRestart < 10_000, "the kill came mid-run")

        let second = try Self.relayProcess(harness, keyPath: keyPath)
        try await harness.waitUntilEverythingIsDelivered(generated, group: "cli")
        second.process.terminate()
        #expect(await second.finish().status == 0)
        #expect(harness.backwardsUpdates == 0)
        print("fault figures: SIGKILL after \(receivedBeforeRestart) of 10000 fixes delivered; duplicates after restart \(harness.duplicateFixes)")
        await harness.shutdown()
    }

    @Test func sigtermUnderLoadExitsZeroAndCommitsOnlyWhatFinished() async throws {
        let (harness, generated) = try await RelayHarness.withBacklog(
            partitions: 4, vehicles: 1000, fixesPerVehicle: 10, latency: .milliseconds(20))
        let keyPath = harness.writeKeyFile()

        let relay = try Self.relayProcess(harness, keyPath: keyPath, extra: ["--shutdown-timeout", "10s"])
        try await eventually("the relay is under way") { harness.emulator.statistics.locationsReceived >= 1000 }
        let signalled = ContinuousClock.now
        relay.process.terminate()
        let result = await relay.finish()
        let shutdownTime = ContinuousClock.now - signalled
        #expect(result.status == 0, "stderr: \(result.stderrExcerpt(1500))")
        // Bounded by the 10 s shutdown timeout; leaving the group adds a little, more on a loaded machine.
        #expect(shutdownTime < .seconds(10) * 3, "stopped within the shutdown timeout (plus leaving the group)")

        // Every record below a committed offset reached Fleet Engine.
        let committed = try await harness.committedOffsets(group: "cli")
        let records = try await harness.read(topic: harness.topic, count: generated.events.count)
        #expect(records.count == generated.events.count)
        let delivered = harness.emulator.vehicles
        var coveredRecords = 0
        for record in records where record.offset < (committed[record.partition] ?? nil) ?? 0 {
            let event = try JSONParser.parse(record.value)
            let id = try #require(event["vehicle_id"]?.stringValue)
            let time = try #require(event["recorded_at"]?.stringValue.flatMap(RFC3339.parseMilliseconds))
            #expect(delivered[VehicleIdentity(kind: .vehicle, id: id)]?.receivedFixTimes.contains(time) == true,
                    "committed record \(record.partition)/\(record.offset) was never delivered")
            coveredRecords += 1
        }
        #expect(coveredRecords > 0)
        print("fault figures: SIGTERM under load, shutdown took \(shutdownTime), \(coveredRecords) records committed, \(harness.emulator.statistics.locationsReceived) fixes delivered")
        await harness.shutdown()
    }
}

extension IntegrationTests.RelayFaultTests {
    @Test func partitionCommitWaitsWhileTheDeadLetterTopicIsUnavailable() async throws {
        let harness = try await RelayHarness(partitions: 1)
        try await harness.produceTenFixesWithABadRecordAtOffsetFive()
        // Produce requests (the dead-letter writes) fail with NOT_LEADER_FOR_PARTITION for a while.
        harness.cluster.failNextRequests(apiKey: 0, error: 6, count: 100)

        let running = try harness.startRelay(group: "relay")
        try await eventually("the good records are finished and committed up to the bad one") {
            let committed = try await harness.committedOffsets(group: "relay")
            return running.relay.statistics.snapshot.finished == 10 && committed[0] == .some(5)
        }
        #expect(running.relay.statistics.snapshot.deadLettered == 0, "the dead letter is not written yet")
        try await eventually("the dead letter is written once the topic is back", timeout: .seconds(120)) {
            running.relay.statistics.snapshot.deadLettered == 1
        }
        try await eventually("offsets are committed to the end") { try await harness.committedToTheEnd(group: "relay") }
        try await running.stop()
        #expect(try await harness.readDeadLetters(count: 1).first?.header("fleet-relay-error") == "missing_field")
        await harness.shutdown()
    }
}

extension IntegrationTests.RelayFaultTests {
    static func check(_ name: String, of running: RelayHarness.RunningRelay) -> RelayHealth.Check? {
        running.relay.health.readiness.first { $0.name == name }
    }

    /// A member the group threw out (its heartbeat refused: session timeout, fenced) is not ready
    /// until it has rejoined, and loses nothing meanwhile.
    @Test func readinessFailsWhileGroupMembershipIsLost() async throws {
        let (harness, generated) = try await RelayHarness.withBacklog(partitions: 2, vehicles: 50, fixesPerVehicle: 4)
        let running = try harness.startRelay(group: "relay")
        try await eventually("joined") { Self.check("consumer_group", of: running)?.ok == true }
        // Heartbeat → UNKNOWN_MEMBER_ID: librdkafka drops the assignment as lost and rejoins;
        // JoinGroup → COORDINATOR_LOAD_IN_PROGRESS keeps it out for a while.
        harness.cluster.failNextRequests(apiKey: 11, error: 14, count: 10)
        harness.cluster.failNextRequests(apiKey: 12, error: 25, count: 1)
        try await eventually("readiness reports the lost membership", timeout: .seconds(120)) {
            let check = Self.check("consumer_group", of: running)
            return check?.ok == false && check?.detail.contains("membership lost") == true
        }
        try await eventually("rejoined", timeout: .seconds(180)) { Self.check("consumer_group", of: running)?.ok == true }
        try await harness.waitUntilEverythingIsDelivered(generated, group: "relay")
        try await running.stop()
        await harness.shutdown()
    }

    /// Kafka answering errors instead of records (here: a topic that does not exist yet) is
    /// counted and shown in readiness until records flow; the log says so once, not per poll.
    @Test func consumeErrorsTurnReadinessOffUntilRecordsFlow() async throws {
        let harness = try await RelayHarness(partitions: 1)
        // The mock cluster creates topics on first use, so the topic is made missing in its metadata.
        let missing = "missing-\(UUID().uuidString.prefix(8))"
        try harness.cluster.createTopic(missing, partitions: 1)
        harness.cluster.setTopicError(missing, error: 3)  // UNKNOWN_TOPIC_OR_PART
        let logs = CapturedLogs()
        let running = try harness.startRelay(group: "relay", logger: logs.logger) {
            $0.topic = missing
            $0.kafka["topic.metadata.refresh.interval.ms"] = "500"
        }
        try await eventually("readiness reports the consume error") {
            let check = Self.check("kafka_consume", of: running)
            return check?.ok == false && check?.detail.contains("Unknown topic or partition") == true
        }
        harness.cluster.setTopicError(missing, error: 0)
        let events = GeneratedEvents(vehicles: 5, fixesPerVehicle: 1).events
        try await KafkaProducer.run(configuration: harness.kafka, logger: harness.logger) { producer in
            for event in events { try await producer.send(topic: missing, key: event.record.key, value: event.record.value) }
        }
        try await eventually("records flow and readiness recovers", timeout: .seconds(180)) {
            Self.check("kafka_consume", of: running)?.ok == true && harness.lostEvents(events).isEmpty
        }
        let errors = running.relay.statistics.snapshot.consumeErrors
        try await running.stop()
        let logged = logs.lines.filter { $0.contains("Kafka consume error") }
        #expect(errors >= 1 && logged.count >= 1 && logged.count <= 10, "\(errors) errors, \(logged.count) lines logged")
        await harness.shutdown()
    }

    @Test func readinessFailsDuringALongFleetEngineOutageAndRecovers() async throws {
        let (harness, generated) = try await RelayHarness.withBacklog(partitions: 1, vehicles: 20, fixesPerVehicle: 5)
        harness.emulator.goDown(for: .seconds(3600))  // until readiness has reported it
        let running = try harness.startRelay(group: "relay") { $0.readyMaximumOutage = .seconds(2) }
        let health = running.relay.health
        let ops = try await OpsServer(
            host: "127.0.0.1", port: 0, registry: PrometheusCollectorRegistry(),
            liveness: { health.liveness.map { OpsServer.Check(name: $0.name, ok: $0.ok, detail: $0.detail) } },
            readiness: { health.readiness.map { OpsServer.Check(name: $0.name, ok: $0.ok, detail: $0.detail) } })
        let readyz = "http://127.0.0.1:\(ops.port)/readyz"
        try await eventually("/readyz reports the Fleet Engine outage") {
            let (status, body) = try await httpGet(readyz)
            let failing = try JSONParser.parse(body)["failing"]
            return status == 503 && failing == .string("fleet_engine")
        }
        harness.emulator.goDown(for: .zero)
        try await eventually("/readyz recovers after the outage", timeout: .seconds(120)) {
            try await httpGet(readyz).status == 200
        }
        #expect(try await httpGet("http://127.0.0.1:\(ops.port)/healthz").status == 200)
        try await harness.waitUntilEverythingIsDelivered(generated, group: "relay")
        try await running.stop()
        await ops.shutdown()
        await harness.shutdown()
    }
}
