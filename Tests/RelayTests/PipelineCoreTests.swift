import FleetAuth
import FleetEngine
import FleetEngineEmulator
import FleetModel
import Foundation
import JSON
import Kafka
@testable import Relay
import Synchronization
import Testing

/// The pipeline core under routine production events: rebalances while fetching
/// is paused, a vehicle Fleet Engine keeps refusing, long histories. Each test
/// reads the outcome from independent observers: the emulator's fix history and
/// offsets committed as a second Kafka client sees them.
extension PipelineIntegrationTests {
    @Suite struct PipelineCoreTests {
        /// The relay paused fetching during an outage, then the group rebalanced twice
        /// (a member joined and left). Once the outage ends the relay must fetch again:
        /// librdkafka keeps an application pause on a partition across assignments.
        @Test(arguments: [nil, "cooperative-sticky"])
        func fetchingResumesAfterRebalancesDuringAnOutage(assignor: String?) async throws {
            let (harness, generated) = try await RelayHarness.withBacklog(partitions: 4, vehicles: 400, fixesPerVehicle: 10)
            harness.emulator.goDown(for: .seconds(3600))
            func configure(_ configuration: inout RelayConfiguration) {
                configuration.maximumPendingRecords = 400
                configuration.shutdownTimeout = .seconds(2)
                if let assignor { configuration.kafka["partition.assignment.strategy"] = assignor }
            }
            let first = try harness.startRelay(group: "relay", configure: configure)
            try await eventually("fetching pauses during the outage") { first.relay.isPaused }

            let second = try harness.startRelay(group: "relay", configure: configure)
            try await eventually("the joining member is assigned partitions", timeout: .seconds(240)) {
                !second.relay.assignedPartitions.isEmpty && first.relay.assignedPartitions.count < 4
            }
            try await second.stop()
            try await eventually("the first member owns every partition again", timeout: .seconds(240)) {
                first.relay.assignedPartitions.count == 4
            }

            harness.emulator.goDown(for: .zero)
            do {
                try await harness.waitUntilEverythingIsDelivered(generated, group: "relay")
            } catch {
                let lost = harness.lostEvents(generated.events)
                let committed = try? await harness.committedOffsets(group: "relay")
                let ends = try? await harness.endOffsets()
                Issue.record("\(lost.count) fixes never arrived; committed \(String(describing: committed)), ends \(String(describing: ends)); relay: \(first.relay.stateDescription); \(first.relay.statistics.snapshot)")
                throw error
            }
            try await first.stop()
            #expect(harness.backwardsUpdates == 0)
            #expect(first.relay.statistics.snapshot.deadLettered == 0)
            await harness.shutdown()
        }

        /// Fleet Engine takes 12 s to apply each update and applies it even when the client went
        /// away: a reset stream says nothing about whether the update was applied. A member joins
        /// while every vehicle's update hangs, and later leaves while they hang again. Each revoke
        /// waits for the answers under way before the partitions move, so no update of the old
        /// owner lands after the new owner's live read and newer fix. A revoke that cancelled them
        /// instead let them land late, after the newer fix: vehicles moved back in time.
        @Test func aRevokeWaitsForTheAnswersUnderWaySoNoLateUpdateMovesAVehicleBack() async throws {
            let harness = try await RelayHarness(partitions: 4)
            let slow = FleetEngineEmulator.FaultPlan(updateLatency: .seconds(12), appliesAbandonedUpdates: true)
            harness.emulator.faultPlan = slow
            let first = GeneratedEvents(vehicles: 40, fixesPerVehicle: 1)
            try await harness.produce(first.events.map(\.record))
            func configure(_ configuration: inout RelayConfiguration) {
                configuration.revokeDrainTimeout = .seconds(35)
                configuration.shutdownTimeout = .seconds(35)
                // The mock cluster gives a rebalance only the session timeout (a broker gives it
                // max.poll.interval.ms) and drops a member still in its revoke by then. Cooperative
                // rebalancing revokes while the group is up, so the revoke can wait there too; and
                // 12 s of latency (not more) lets each wait end before the mock cluster's patience
                // does, also on a loaded machine, while each revoke still begins with updates hanging.
                configuration.kafka["partition.assignment.strategy"] = "cooperative-sticky"
            }
            let old = try harness.startRelay(group: "relay", requestTimeout: .seconds(30), configure: configure)
            try await eventually("every vehicle's update hangs at Fleet Engine") { harness.emulator.openUpdates == 40 }

            let joining = try harness.startRelay(group: "relay", requestTimeout: .seconds(30), configure: configure)
            try await eventually("the joining member is assigned partitions", timeout: .seconds(240)) {
                !joining.relay.assignedPartitions.isEmpty
            }
            // Fast from now on: an update of the old owner still to be applied would land after the new owner's.
            harness.emulator.faultPlan = .init()
            let second = GeneratedEvents(vehicles: 40, fixesPerVehicle: 2, startingAfter: first)
            try await harness.produce(second.events.map(\.record))
            try await harness.waitUntilEverythingIsDelivered(GeneratedEvents(events: first.events + second.events),
                                                             group: "relay")
            #expect(joining.relay.statistics.snapshot.accepted > 0, "the joining member delivered some vehicles")

            // The joiner leaves while both members' updates hang: the old member's revoke waits again.
            harness.emulator.faultPlan = slow
            let third = GeneratedEvents(vehicles: 40, fixesPerVehicle: 1, startingAfter: second)
            try await harness.produce(third.events.map(\.record))
            try await eventually("every vehicle's update hangs again") { harness.emulator.openUpdates == 40 }
            async let left: Void = joining.stop()
            try await eventually("the first member owns every partition again", timeout: .seconds(240)) {
                old.relay.assignedPartitions.count == 4
            }
            harness.emulator.faultPlan = .init()
            try await left
            let fourth = GeneratedEvents(vehicles: 40, fixesPerVehicle: 2, startingAfter: third)
            try await harness.produce(fourth.events.map(\.record))
            try await harness.waitUntilEverythingIsDelivered(
                GeneratedEvents(events: first.events + second.events + third.events + fourth.events), group: "relay")
            #expect(harness.backwardsUpdates == 0, "an update landed after a newer fix of its vehicle")
            #expect(harness.emulator.statistics.overlappingUpdates == 0,
                    "an update arrived while the previous owner's update of the vehicle was still open")
            try await old.stop()
            await harness.shutdown()
        }

        /// Twice as many vehicles as `--max-in-flight` are answered 503 for as long as the test
        /// runs. None of them holds a request slot while it waits to retry, so every other
        /// vehicle's fixes arrive; Fleet Engine hears from the stuck ones at the pace of the
        /// backoff, not in a loop; and a few refused vehicles are no outage: `/readyz` stays 200.
        @Test func vehiclesFleetEngineKeepsRefusingHoldUpNoOtherVehicle() async throws {
            let harness = try await RelayHarness(partitions: 4)
            let maxInFlight = 8
            let stuck = Set((0..<(2 * maxInFlight)).map { "veh-\($0 * 12)" })
            harness.emulator.faultPlan = .init(unavailableVehicles: stuck)
            let generated = GeneratedEvents(vehicles: 200, fixesPerVehicle: 10)
            try await harness.produce(generated.events.map(\.record))
            let metricsPort = try freeLoopbackPort()
            let started = ContinuousClock.now
            let relay = try IntegrationTests.CommandLineTests.RunningProcess([
                "run", "--brokers", harness.cluster.bootstrapServers, "--topic", harness.topic, "--group", "relay",
                "--key-file", harness.writeKeyFile(), "--fleet-engine-url", harness.emulatorURL, "--ca-file", harness.caFile,
                "--max-in-flight", "\(maxInFlight)", "--retry-initial-ms", "100", "--retry-max-ms", "2000",
                "--kafka-property", "session.timeout.ms=6000", "--metrics-port", "\(metricsPort)", "--metrics-host", "127.0.0.1",
            ])
            let others = generated.events.filter { !stuck.contains($0.vehicle) }
            var readiness: [Int] = []
            try await eventually("every other vehicle's fixes arrive", timeout: .seconds(180)) {
                let lost = harness.lostEvents(others).count
                if lost < others.count { readiness.append(try await httpGet("http://127.0.0.1:\(metricsPort)/readyz").status) }
                return lost == 0
            }
            try await eventually("every stuck vehicle is tried again and again") {
                let tries = harness.emulator.statistics.unavailableVehicleRequests
                return stuck.allSatisfy { tries[$0, default: 0] >= 4 }
            }
            let (ready, body) = try await httpGet("http://127.0.0.1:\(metricsPort)/readyz")
            readiness.append(ready)
            let elapsed = (ContinuousClock.now - started).seconds
            let tries = harness.emulator.statistics.unavailableVehicleRequests.values.reduce(0, +)
            // Full jitter below a 2 s cap waits 1 s on average: a few tries a second at most.
            #expect(Double(tries) / Double(stuck.count) / elapsed < 4,
                    "\(tries) tries of \(stuck.count) stuck vehicles in \(elapsed) s: a retry loop, not a backoff")
            #expect(readiness.allSatisfy { $0 == 200 }, "readiness \(readiness); last: \(body)")
            #expect(try await metricValue("fleet_relay_vehicles_retrying", port: metricsPort) == Double(stuck.count))
            relay.process.terminate()
            let finished = await relay.finish()
            #expect(finished.status == 0)
            #expect(!finished.stderr.contains("outage began"), "16 of 200 vehicles refused is no outage")
            #expect(harness.backwardsUpdates == 0)
            await harness.shutdown()
        }

        /// Fleet Engine answers one vehicle 503 for as long as the test runs. Every other
        /// vehicle, on every partition, keeps flowing; only the stuck vehicle's partition
        /// holds its commit, at the stuck vehicle's first record.
        @Test func aVehicleStuckInRetriesHoldsOnlyItsOwnPartitionsCommit() async throws {
            let harness = try await RelayHarness(partitions: 4)
            let stuckVehicle = "veh-7"
            harness.emulator.faultPlan = .init(unavailableVehicles: [stuckVehicle])
            let before = GeneratedEvents(vehicles: 200, fixesPerVehicle: 10)
            try await harness.produce(before.events.map(\.record))
            let keyPath = harness.writeKeyFile()
            let metricsPort = try freeLoopbackPort()
            let relay = try IntegrationTests.CommandLineTests.RunningProcess([
                "run", "--brokers", harness.cluster.bootstrapServers, "--topic", harness.topic, "--group", "relay",
                "--key-file", keyPath, "--fleet-engine-url", harness.emulatorURL, "--ca-file", harness.caFile, "--max-in-flight", "8",
                "--max-pending-records", "400",
                "--retry-initial-ms", "10", "--retry-max-ms", "200",
                "--kafka-property", "session.timeout.ms=6000", "--metrics-port", "\(metricsPort)", "--metrics-host", "127.0.0.1",
            ])
            let others = before.events.filter { $0.vehicle != stuckVehicle }
            try await eventually("every other vehicle's fixes arrive") { harness.lostEvents(others).isEmpty }

            // Newer fixes produced while the vehicle is stuck flow as well.
            let after = GeneratedEvents(vehicles: 200, fixesPerVehicle: 10, startingAfter: before)
            try await harness.produce(after.events.map(\.record))
            let othersAfter = after.events.filter { $0.vehicle != stuckVehicle }
            try await eventually("every other vehicle's newer fixes arrive", timeout: .seconds(180)) {
                harness.lostEvents(othersAfter).isEmpty
            }

            // Where the stuck vehicle's first record sits, as a second client reads the topic.
            let records = try await harness.read(topic: harness.topic, count: before.events.count + after.events.count)
            let stuckRecord = try #require(records.filter { $0.key == Array(stuckVehicle.utf8) }.min { $0.offset < $1.offset })
            let end = try await harness.endOffsets()
            try await eventually("other partitions commit to their end; the stuck one holds at its stuck record") {
                let committed = try await harness.committedOffsets(group: "relay")
                return (0..<Int32(4)).allSatisfy { partition in
                    partition == stuckRecord.partition
                        ? (committed[partition] ?? nil) ?? 0 == stuckRecord.offset
                        : committed[partition] == .some(end[partition])
                }
            }
            let gauge = "fleet_relay_oldest_unfinished_seconds{topic=\"\(harness.topic)\",partition=\"\(stuckRecord.partition)\"}"
            let firstAge = try await metricValue(gauge, port: metricsPort)
            try await eventually("the oldest unfinished record's age grows") {
                try await metricValue(gauge, port: metricsPort) > firstAge
            }
            #expect(harness.emulator.vehicle(VehicleIdentity(kind: .vehicle, id: stuckVehicle)) == nil)
            relay.process.terminate()
            #expect(await relay.finish().status == 0)
            #expect(harness.backwardsUpdates == 0)
            await harness.shutdown()
        }

        /// A backlog of one vehicle longer than the past-locations cap goes out as
        /// several requests, oldest first: every fix arrives, none out of order.
        @Test func aHistoryLongerThanThePastLocationsCapArrivesWholeAndInOrder() async throws {
            let harness = try await RelayHarness(partitions: 1)
            let generated = GeneratedEvents(vehicles: 1, fixesPerVehicle: 300)
            try await harness.produce(generated.events.map(\.record))

            let running = try harness.startRelay(group: "relay") { $0.pastLocationsLimit = 100 }
            try await eventually("every record is finished") { running.relay.statistics.snapshot.finished == 300 }
            try await eventually("offsets are committed to the end") { try await harness.committedToTheEnd(group: "relay") }
            try await running.stop()

            #expect(harness.lostEvents(generated.events).count == 0, "fixes lost")
            let vehicle = try #require(harness.emulator.vehicle(VehicleIdentity(kind: .vehicle, id: "veh-0")))
            #expect(vehicle.fixesOutOfOrder == 0)
            #expect(vehicle.updates >= 3, "at most 101 fixes per request")
            #expect(vehicle.locationTimeMilliseconds == generated.events.last?.recordedAt)
            #expect(harness.backwardsUpdates == 0)
            await harness.shutdown()
        }

        /// Every broker answers 1 s late (fetches, commits, metadata, watermark queries): fixes
        /// still go out as they are fetched and commits keep advancing, wave after wave — nothing
        /// in the delivery path waits for the broker.
        @Test func aSlowBrokerDelaysNeitherDeliveryNorCommits() async throws {
            let harness = try await RelayHarness(partitions: 4)
            for broker: Int32 in 1...3 { harness.cluster.setBrokerRoundTripTime(broker, .seconds(1)) }
            let probeStarted = ContinuousClock.now
            _ = try await harness.endOffsets()
            #expect(ContinuousClock.now - probeStarted >= .seconds(1), "the brokers answer late")
            let running = try harness.startRelay(group: "relay")
            var previous: GeneratedEvents?
            for wave in 0..<2 {
                let events = GeneratedEvents(vehicles: 50, fixesPerVehicle: 4, prefix: "wave\(wave)-", startingAfter: previous)
                try await harness.produce(events.events.map(\.record))
                try await eventually("wave \(wave) reaches the emulator", timeout: .seconds(120)) {
                    harness.lostEvents(events.events).isEmpty
                }
                try await eventually("wave \(wave) is committed", timeout: .seconds(120)) {
                    try await harness.committedToTheEnd(group: "relay")
                }
                previous = events
            }
            try await running.stop()
            #expect(harness.duplicateFixes == 0)
            #expect(harness.backwardsUpdates == 0)
            await harness.shutdown()
        }

        /// With 100 partitions and every broker answering 1 s late, each assigned partition's lag,
        /// committed-offset and oldest-unfinished series exist as soon as the relay joined its
        /// group; lag shows each partition's backlog within seconds, and once everything went out
        /// lag is 0 and the committed offset the partition's end. The figures come with librdkafka's
        /// statistics: no query per partition waits for the slow broker.
        @Test func partitionGaugesExistFromTheAssignmentAndFollowASlowBrokerOnTime() async throws {
            let partitions = 100
            let harness = try await RelayHarness(partitions: partitions)
            let generated = GeneratedEvents(vehicles: 400, fixesPerVehicle: 2)
            try await harness.produce(generated.events.map(\.record))
            let end = try await harness.endOffsets()
            harness.emulator.goDown(for: .seconds(3600))
            for broker: Int32 in 1...3 { harness.cluster.setBrokerRoundTripTime(broker, .seconds(1)) }
            let port = try freeLoopbackPort()
            let relay = try IntegrationTests.CommandLineTests.RunningProcess([
                "run", "--brokers", harness.cluster.bootstrapServers, "--topic", harness.topic, "--group", "relay",
                "--key-file", harness.writeKeyFile(), "--fleet-engine-url", harness.emulatorURL, "--ca-file", harness.caFile,
                "--kafka-property", "statistics.interval.ms=1000", "--kafka-property", "session.timeout.ms=6000",
                "--metrics-port", "\(port)", "--metrics-host", "127.0.0.1",
            ])
            let names = ["fleet_relay_consumer_lag", "fleet_relay_committed_offset", "fleet_relay_oldest_unfinished_seconds"]
            func values(_ name: String) async throws -> [Int32: Double] {
                let text = try await httpGet("http://127.0.0.1:\(port)/metrics").body
                var found: [Int32: Double] = [:]
                for partition in 0..<Int32(partitions) {
                    found[partition] = metricValue(text, name, ["topic": harness.topic, "partition": "\(partition)"])
                }
                return found.compactMapValues { $0 }
            }
            try await eventually("the relay joined its group", timeout: .seconds(240)) {
                guard let body = try? await httpGet("http://127.0.0.1:\(port)/readyz").body else { return false }  // not listening yet
                return try JSONParser.parse(body)["checks"]?["consumer_group"]?["ok"] == .bool(true)
            }
            for name in names {
                #expect(try await values(name).count == partitions, "\(name) exists for every partition once assigned")
            }
            let started = ContinuousClock.now
            try await eventually("each partition's lag shows its backlog", timeout: .seconds(60)) {
                let lag = try await values("fleet_relay_consumer_lag")
                return (0..<Int32(partitions)).allSatisfy { lag[$0] == Double(end[$0]!) }
            }
            let shown = ContinuousClock.now - started
            #expect(shown < .seconds(30), "lag of 100 partitions took \(shown) with the broker 1 s late")

            harness.emulator.goDown(for: .zero)
            try await eventually("everything reaches the emulator", timeout: .seconds(240)) {
                harness.lostEvents(generated.events).isEmpty
            }
            try await eventually("the gauges show every partition committed to its end", timeout: .seconds(120)) {
                let (lag, committed) = (try await values("fleet_relay_consumer_lag"), try await values("fleet_relay_committed_offset"))
                return (0..<Int32(partitions)).allSatisfy { lag[$0] == 0 && committed[$0] == Double(end[$0]!) }
            }
            relay.process.terminate()
            #expect(await relay.finish().status == 0)
            await harness.shutdown()
        }

        /// 4,000 vehicles report once each, then go quiet: the relay forgets them, so
        /// memory follows the vehicles that are active, not every vehicle ever seen.
        @Test func vehiclesThatWentQuietAreForgotten() async throws {
            let harness = try await RelayHarness(partitions: 4)
            let passing = GeneratedEvents(vehicles: 4_000, fixesPerVehicle: 1, prefix: "passing-")
            try await harness.produce(passing.events.map(\.record))
            // One wildcard token for every vehicle: the test is about lanes, not about minting 4,000 tokens.
            let tokens = TokenCache(signer: LocalKeySigner(key: harness.key), wildcard: true)
            let running = try harness.startRelay(group: "relay", tokens: tokens) { $0.vehicleIdleTimeout = .seconds(2) }
            try await eventually("every record is finished", timeout: .seconds(900)) {
                running.relay.statistics.snapshot.finished == passing.events.count
            }
            let active = GeneratedEvents(vehicles: 10, fixesPerVehicle: 1, prefix: "active-", startingAfter: passing)
            try await harness.produce(active.events.map(\.record))
            try await eventually("the active vehicles' fixes arrive") { harness.lostEvents(active.events).isEmpty }
            try await eventually("only about the active vehicles are remembered", timeout: .seconds(120)) {
                running.relay.vehicleCount <= 100
            }
            try await eventually("offsets are committed to the end") { try await harness.committedToTheEnd(group: "relay") }
            try await running.stop()
            let totals = running.relay.statistics.snapshot
            #expect(totals.deadLettered == 0)
            #expect(harness.lostEvents(passing.events).count == 0, "fixes lost")
            #expect(harness.backwardsUpdates == 0)
            await harness.shutdown()
        }

        /// The dead-letter topic does not exist: the relay says so on /readyz, holds the
        /// commit at the bad record without spinning, and drains once the topic exists.
        @Test func aMissingDeadLetterTopicHoldsTheCommitAndTurnsReadinessOff() async throws {
            let harness = try await RelayHarness(partitions: 1)
            try await harness.produceTenFixesWithABadRecordAtOffsetFive()
            // The mock cluster creates topics on first use, so the topic is made missing in its metadata.
            let missingTopic = harness.topic + ".missing-dlq"
            try harness.cluster.createTopic(missingTopic, partitions: 1)
            harness.cluster.setTopicError(missingTopic, error: 3)  // UNKNOWN_TOPIC_OR_PART

            let running = try harness.startRelay(group: "relay") { configuration in
                configuration.deadLetterTopic = missingTopic
                configuration.kafka["topic.metadata.propagation.max.ms"] = "1000"
                configuration.retryPolicy = RetryPolicy(initialDelay: .milliseconds(10), maximumDelay: .seconds(1))
            }
            try await eventually("/readyz names the dead-letter topic") {
                running.relay.health.readiness.contains { !$0.ok && $0.name == "dead_letter_topic" && $0.detail.contains(missingTopic) }
            }
            try await eventually("the good records are committed up to the bad one") {
                try await harness.committedOffsets(group: "relay")[0] == .some(5)
            }
            // Not spinning: the letter is tried again at the backoff's pace (10 ms doubling to 1 s,
            // jittered), a few times a second at most. Counted at the writer, not as the process's
            // CPU, which the tests running beside this one share.
            let writer = try #require(running.relay.driver.deadLetters)
            let writesBefore = writer.writesStarted
            let wallBefore = ContinuousClock.now
            try await Task.sleep(for: .seconds(5))  // the span writes are counted over, not a wait for a condition
            let writes = writer.writesStarted - writesBefore
            let span = (ContinuousClock.now - wallBefore).seconds
            #expect(writes >= 1 && Double(writes) <= 10 * span, "\(writes) writes of the one letter in \(span) s")
            #expect(try await harness.committedOffsets(group: "relay")[0] == .some(5), "the commit holds at the bad record")

            harness.cluster.setTopicError(missingTopic, error: 0)
            try await eventually("the dead letter is written once the topic exists", timeout: .seconds(180)) {
                running.relay.statistics.snapshot.deadLettered == 1
            }
            try await eventually("offsets are committed to the end") { try await harness.committedToTheEnd(group: "relay") }
            #expect(running.relay.health.readiness.allSatisfy { $0.ok })
            try await running.stop()
            let letters = try await harness.read(topic: missingTopic, count: 1)
            #expect(letters.first?.header("fleet-relay-error") == "missing_field")
            await harness.shutdown()
        }

        /// SIGTERM while the dead-letter topic refuses the bad record's letter: the relay stops
        /// within its shutdown timeout, the letter unwritten and the bad record uncommitted, and
        /// the next relay writes it once the topic is back.
        @Test func aShutdownWhileTheDeadLetterTopicRefusesEndsAndLeavesTheRecordUncommitted() async throws {
            let harness = try await RelayHarness(partitions: 1)
            try await harness.produceTenFixesWithABadRecordAtOffsetFive()
            let refusingTopic = harness.topic + ".refusing-dlq"
            try harness.cluster.createTopic(refusingTopic, partitions: 1)
            harness.cluster.setTopicError(refusingTopic, error: 3)  // UNKNOWN_TOPIC_OR_PART
            func configure(_ configuration: inout RelayConfiguration) {
                configuration.deadLetterTopic = refusingTopic
                configuration.kafka["topic.metadata.propagation.max.ms"] = "1000"
                configuration.shutdownTimeout = .seconds(3)
            }
            let first = try harness.startRelay(group: "relay", configure: configure)
            try await eventually("/readyz names the dead-letter topic") {
                first.relay.health.readiness.contains { !$0.ok && $0.name == "dead_letter_topic" }
            }
            try await eventually("the good records are committed up to the bad one") {
                try await harness.committedOffsets(group: "relay")[0] == .some(5)
            }
            #expect(await first.stop(within: .seconds(60)), "graceful shutdown ended the relay while its dead letter was refused")
            #expect(try await harness.committedOffsets(group: "relay")[0] == .some(5), "the bad record stays uncommitted")

            harness.cluster.setTopicError(refusingTopic, error: 0)
            let second = try harness.startRelay(group: "relay", configure: configure)
            try await eventually("offsets are committed to the end", timeout: .seconds(120)) {
                try await harness.committedToTheEnd(group: "relay")
            }
            try await second.stop()
            let letters = try await harness.read(topic: refusingTopic, count: 1)
            #expect(letters.first?.header("fleet-relay-error") == "missing_field")
            await harness.shutdown()
        }
    }
}

extension Duration {
    var seconds: Double { Double(components.seconds) + Double(components.attoseconds) / 1e18 }
}

/// The value of one series on a relay's `/metrics`, e.g. `name{label="x"}`; throws when absent.
func metricValue(_ series: String, port: Int) async throws -> Double {
    let body = try await httpGet("http://127.0.0.1:\(port)/metrics").body
    for line in body.split(separator: "\n") where line.hasPrefix(series + " ") {
        if let value = Double(line.dropFirst(series.count + 1)) { return value }
    }
    let name = series.prefix { $0 != "{" }
    let similar = body.split(separator: "\n").filter { $0.hasPrefix(name) }.joined(separator: "; ")
    throw FixtureError(message: "no series \(series) on /metrics (\(name) series: \(similar))")
}

/// The dead-letter writer against a topic that refuses records, then takes them again.
@Suite struct DeadLetterWriterTests {
    /// 200 letters for a refusing topic, pulled by as many writers as the pipeline runs: each
    /// write is one attempt that fails and returns, instead of waiting for its retry while
    /// holding its writer (the pipeline's state orders it again; here the writers put it back).
    /// Once the topic takes records again every letter arrives, once, and the writer's run
    /// returns only after its producer delivered them.
    @Test func aRefusingTopicFailsEachAttemptAndEveryLetterArrivesAfterwards() async throws {
        let harness = try await RelayHarness(partitions: 1)
        let topic = harness.topic + ".refusing-dlq"
        try harness.cluster.createTopic(topic, partitions: 1)
        harness.cluster.setTopicError(topic, error: 3)  // UNKNOWN_TOPIC_OR_PART
        var configuration = harness.kafka
        configuration["topic.metadata.propagation.max.ms"] = "1000"
        configuration["message.timeout.ms"] = "1000"
        let writer = DeadLetterWriter(topic: topic, producerConfiguration: configuration, logLimiter: LogLimiter(),
                                      health: RelayHealth(), logger: harness.logger)
        let pile = LetterPile((0..<200).map { offset -> DeadLetterOrder in
            let record = KafkaRecord(topic: harness.topic, partition: 0, offset: Int64(offset), key: nil, value: Array("letter \(offset)".utf8))
            return DeadLetterOrder(source: RecordSource(record), reason: .retryDeadlineExceeded, detail: "\(offset)")
        })
        let running = Task {
            try await writer.run { write in
                await withDiscardingTaskGroup { writers in
                    for _ in 0..<DeadLetterWriter.maximumInFlight {
                        writers.addTask {
                            while let letter = pile.queue.withLock({ $0.popLast() }) {
                                if await write(letter) {
                                    pile.written.withLock { $0.append(letter.source.offset) }
                                } else {
                                    pile.failedWrites.withLock { $0 += 1 }
                                    pile.queue.withLock { $0.insert(letter, at: 0) }
                                }
                            }
                        }
                    }
                }
            }
        }
        try await eventually("every writer has a write under way") {
            writer.lettersInFlight == DeadLetterWriter.maximumInFlight
        }
        try await eventually("failed attempts return, freeing their writers") {
            pile.failedWrites.withLock { $0 } >= 2 * DeadLetterWriter.maximumInFlight
        }
        #expect(pile.written.withLock { $0.isEmpty })
        #expect(writer.lettersInFlight <= DeadLetterWriter.maximumInFlight)

        harness.cluster.setTopicError(topic, error: 0)
        try await eventually("every letter is written", timeout: .seconds(120)) { pile.written.withLock { $0.count } == 200 }
        try await running.value
        let letters = try await harness.read(topic: topic, count: 200)
        let details = letters.compactMap { $0.header("fleet-relay-detail").flatMap { Int64($0) } }
        #expect(Set(details) == Set(0..<200), "each letter once")
        #expect(writer.lettersInFlight == 0)
        await harness.shutdown()
    }
}

/// Letters to write, shared by the writers of `DeadLetterWriterTests`.
private final class LetterPile: Sendable {
    let queue: Mutex<[DeadLetterOrder]>
    let written = Mutex([Int64]())
    let failedWrites = Mutex(0)

    init(_ letters: [DeadLetterOrder]) {
        queue = Mutex(letters)
    }
}
