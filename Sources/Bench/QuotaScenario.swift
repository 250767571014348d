import Foundation
import JSON

extension Scenarios {
    // MARK: 7. Quota

    /// One drain against the emulator's project quota.
    struct QuotaCase {
        let label: String
        let title: String
        /// nil: no quota (the unthrottled drain rate).
        let quota: Double?
        let latencyMilliseconds: Int
        var relays = 1
        /// The quota is lifted once half the vehicles are delivered, and as many vehicles again report.
        var liftsHalfway = false
    }

    /// What a drain showed at the emulator and at the relays.
    struct QuotaRun {
        let seconds: Double
        let requests: Double
        let throttled: Double
        let fixesLost: Double
        let backwards: Double
        /// Each relay's admitted requests (its updates, for a build without the quota counters).
        let admittedPerRelay: [Double]
        /// Seconds from lifting the quota until the learnt rate reached the unthrottled drain
        /// rate or pacing ended; nil when it did not before the drain ended, or is not reported.
        let climb: Double?

        var admittedPerSecond: Double { (requests - throttled) / seconds }
        var refusedShare: Double { throttled / max(requests, 1) }
    }

    /// Backlogs of `vehicles` vehicles' fixes (a live-location read and an update each) drained
    /// against a project quota with one second of burst, as Google's front ends keep it: how much
    /// of the quota the relay uses and how many of its requests are refused, with fast and slow
    /// answers, two relays in one group sharing the quota, and the quota lifted halfway.
    func quota(vehicles: Int, fixesPerVehicle: Int, quota: Double, report: inout Report) async throws {
        let section = section("quota")
        let free = try await quotaDrain(QuotaCase(label: "free", title: "unthrottled", quota: nil, latencyMilliseconds: 1),
                                        vehicles: vehicles, fixesPerVehicle: fixesPerVehicle)
        let unthrottledRate = free.requests / free.seconds
        report.add(section, "unthrottled drain, 1 ms answers (the rate a lifted quota climbs back to)", unthrottledRate, "requests/s")
        report.add(section, "quota (1 s of burst)", quota, "requests/s")
        let cases = [
            QuotaCase(label: "fast", title: "1 ms answers", quota: quota, latencyMilliseconds: 1),
            QuotaCase(label: "slow", title: "50 ms answers", quota: quota, latencyMilliseconds: 50),
            QuotaCase(label: "two", title: "two relays in one group, 1 ms answers", quota: quota, latencyMilliseconds: 1, relays: 2),
            QuotaCase(label: "lift", title: "lifted halfway, 1 ms answers", quota: quota, latencyMilliseconds: 1, liftsHalfway: true),
        ]
        for plan in cases {
            let run = try await quotaDrain(plan, vehicles: vehicles, fixesPerVehicle: fixesPerVehicle, unthrottledRate: unthrottledRate)
            let title = plan.title
            report.add(section, "\(title): drained in", run.seconds, "s")
            if !plan.liftsHalfway {
                report.add(section, "\(title): quota used (at least 90 %)", run.admittedPerSecond / quota * 100, "%")
            }
            report.add(section, "\(title): requests refused with 429 (at most 5 %)", run.refusedShare * 100, "%")
            if plan.relays > 1 {
                let total = run.admittedPerRelay.reduce(0, +)
                let smallest = (run.admittedPerRelay.min() ?? 0) / max(total, 1)
                report.add(section, "\(title): the smaller relay's share", smallest * 100, "%")
            }
            // A build without the learnt rate's gauge, or a climb the drain outlasted, reports none.
            if plan.liftsHalfway, let climb = run.climb {
                report.add(section, "\(title): learnt rate back at the unthrottled rate, or pacing ended, after (at most 30 s)", climb, "s")
            }
            report.add(section, "\(title): fixes lost", run.fixesLost, "fixes")
            report.add(section, "\(title): updates that moved a vehicle backwards", run.backwards, "updates")
        }
        try await replayBesideLiveRelay(vehicles: vehicles, fixesPerVehicle: fixesPerVehicle, quota: quota, section: section, report: &report)
    }

    /// A live relay draining its topic's backlog while `fleet-relay replay` (no `--rate`)
    /// backfills another's, both against the quota with 1 ms answers: their shares while both
    /// ran, and the quota used and refused over that stretch.
    private func replayBesideLiveRelay(vehicles: Int, fixesPerVehicle: Int, quota: Double, section: String,
                                       report: inout Report) async throws {
        let title = "a replay beside a live relay, 1 ms answers"
        let live = try await produceBacklog(topic: "bench-quota-live-\(transport.rawValue)", vehicles: vehicles, fixesPerVehicle: fixesPerVehicle,
                                            idPrefix: "quota-live-")
        let replayed = try await produceBacklog(topic: "bench-quota-replayed-\(transport.rawValue)", vehicles: vehicles, fixesPerVehicle: fixesPerVehicle,
                                                idPrefix: "quota-replayed-")
        await probes.setQuota(quota, latencyMilliseconds: 1)
        let before = await probes.emulator()
        let (relay, relayPort, _) = try await environment.startRelay(topic: live.topic, group: "bench-quota-live-\(transport.rawValue)",
                                                                     transport: transport)
        let replayPort = 25_000 + Int.random(in: 0..<5000)
        let endpoint = environment.emulator(transport)
        let replay = try ChildProcess(name: "replay", executable: environment.relayBinary, arguments: [
            "replay", "--brokers", environment.cluster.bootstrapServers, "--topic", replayed.topic, "--from", "-1d", "--to-end",
            "--rate", "0", "--key-file", environment.keyFile, "--fleet-engine-url", endpoint.url, "--progress", "log",
            "--log-level", "warning", "--metrics-port", String(replayPort), "--metrics-host", "127.0.0.1",
        ] + environment.transportArguments(transport), logPath: "\(environment.workDirectory)/replay-quota.log")
        let started = ContinuousClock.now
        func done(_ backlog: Backlog) async -> Bool {
            await probes.emulator(newerThan: backlog.newestAfter, idPrefix: backlog.idPrefix)["vehicles_newer_than"]?.numberValue
                == Double(vehicles)
        }
        var shares: [Double] = []
        var together: (seconds: Double, emulator: JSONValue)?
        // The replay ends by itself: with every fix delivered, or with those whose retries ran
        // out (its --retry-deadline) dead-lettered.
        let delivered = await waitUntil(timeout: .seconds(900)) {
            let (liveDone, replayDone) = (await done(live), await done(replayed) || !replay.process.isRunning)
            if together == nil, liveDone || replayDone {
                together = ((ContinuousClock.now - started).seconds, await probes.emulator())
                let each = [await probes.admittedRequests(metricsPort: relayPort), await probes.admittedRequests(metricsPort: replayPort)]
                shares = each.map { $0 / max(each.reduce(0, +), 1) }
            }
            return liveDone && replayDone
        }
        let after = await probes.emulator()
        _ = await relay.stop()
        _ = await replay.stop()
        await probes.setQuota(nil)
        guard delivered, let together else { throw BenchError("\(title): not drained within 15 minutes") }
        let requests = delta(together.emulator, before, "requests")
        let throttled = delta(together.emulator, before, "throttled_requests")
        report.add(section, "\(title): quota used while both ran (at least 90 %)", (requests - throttled) / together.seconds / quota * 100, "%")
        report.add(section, "\(title): requests refused with 429 while both ran (at most 5 %)", throttled / max(requests, 1) * 100, "%")
        report.add(section, "\(title): the live relay's share while both ran", (shares.first ?? 0) * 100, "%")
        let deadLettered = Self.summaryFigure("dead letters written", inLog: "\(environment.workDirectory)/replay-quota.log") ?? 0
        report.add(section, "\(title): fixes the replay dead-lettered when its retries ran out", deadLettered, "fixes")
        report.add(section, "\(title): fixes lost", Double(2 * vehicles * fixesPerVehicle) - delta(after, before, "distinct_fixes_received")
            - deadLettered, "fixes")
        report.add(section, "\(title): updates that moved a vehicle backwards", delta(after, before, "backwards_updates"), "updates")
    }

    private func quotaDrain(_ plan: QuotaCase, vehicles: Int, fixesPerVehicle: Int, unthrottledRate: Double? = nil) async throws -> QuotaRun {
        let topic = "bench-quota-\(plan.label)-\(transport.rawValue)"
        // Neither prefix starts the other: each batch's vehicles are counted apart.
        let backlog = try await produceBacklog(topic: topic, vehicles: vehicles, fixesPerVehicle: fixesPerVehicle, idPrefix: "quota-\(plan.label)-first-")
        await probes.setQuota(plan.quota, latencyMilliseconds: plan.latencyMilliseconds)
        let before = await probes.emulator()
        let group = "bench-quota-\(plan.label)-\(transport.rawValue)"
        var relays: [(process: ChildProcess, metricsPort: Int)] = []
        for index in 0..<plan.relays {
            let (relay, metricsPort, _) = try await environment.startRelay(topic: topic, group: group, transport: transport,
                                                                           logName: "\(group)-\(index)")
            relays.append((relay, metricsPort))
        }
        let started = ContinuousClock.now
        var expectedEvents = backlog.events
        var lifted: ContinuousClock.Instant?
        var climb: Double?
        var more: Backlog?
        let delivered = try await waitUntil(timeout: .seconds(900)) {
            let newer = await probes.emulator(newerThan: backlog.newestAfter, idPrefix: backlog.idPrefix)["vehicles_newer_than"]?.numberValue ?? 0
            if plan.liftsHalfway, lifted == nil, newer >= Double(vehicles / 2) {
                await probes.setQuota(nil, latencyMilliseconds: plan.latencyMilliseconds)
                lifted = .now
                more = try await produceBacklog(topic: topic, vehicles: vehicles, fixesPerVehicle: fixesPerVehicle,
                                                 idPrefix: "quota-\(plan.label)-more-", createsTopic: false)
                expectedEvents = 2 * backlog.events
            }
            if let lifted, climb == nil, let unthrottledRate,
               let rate = await probes.metricIfPresent("fleet_relay_learned_request_rate", metricsPort: relays[0].metricsPort),
               rate == 0 || rate >= unthrottledRate {
                climb = (ContinuousClock.now - lifted).seconds
            }
            guard newer == Double(vehicles) else { return false }
            guard let later = more else { return !plan.liftsHalfway }
            let newerLater = await probes.emulator(newerThan: later.newestAfter, idPrefix: later.idPrefix)["vehicles_newer_than"]?.numberValue
            return newerLater == Double(vehicles)
        }
        let seconds = (ContinuousClock.now - started).seconds
        let after = await probes.emulator()
        var admittedPerRelay: [Double] = []
        for relay in relays {
            admittedPerRelay.append(await probes.admittedRequests(metricsPort: relay.metricsPort))
        }
        for relay in relays { _ = await relay.process.stop() }
        await probes.setQuota(nil)
        guard delivered else { throw BenchError("the \(plan.title) drain did not end within 15 minutes") }
        return QuotaRun(seconds: seconds, requests: delta(after, before, "requests"), throttled: delta(after, before, "throttled_requests"),
                        fixesLost: Double(expectedEvents) - delta(after, before, "distinct_fixes_received"),
                        backwards: delta(after, before, "backwards_updates"), admittedPerRelay: admittedPerRelay, climb: climb)
    }

    /// The first number on the line of a replay's summary that names `figure`.
    static func summaryFigure(_ figure: String, inLog path: String) -> Double? {
        guard let log = try? String(contentsOfFile: path, encoding: .utf8),
              let line = log.split(separator: "\n").last(where: { $0.contains(figure) }) else { return nil }
        return line.split(separator: " ").lazy.compactMap { Double($0) }.first
    }
}
