import JSON
import Foundation

extension Scenarios {
    // MARK: 6. Replay

    /// A backfill: `fleet-relay replay` of a whole topic of long histories, once per bound on
    /// pending records. Its memory follows the bound, not the window: the peak RSS of two bounds
    /// gives the cost of a pending record, from which the README's figure for an hour of 10,000
    /// vehicles (7.2 million fixes, more than the mock cluster keeps) is worked out.
    func replay(vehicles: Int, fixesPerVehicle: Int, pendingBounds: [Int], report: inout Report) async throws {
        let section = section("replay")
        var peaks: [(bound: Int, peak: Double)] = []
        for bound in pendingBounds {
            let backlog = try await produceBacklog(topic: "bench-replay-\(bound)", vehicles: vehicles, fixesPerVehicle: fixesPerVehicle,
                                                   idPrefix: "replay-\(bound)-")
            let before = await probes.emulator()
            let run = try await replayProcess(topic: backlog.topic, pendingBound: bound)
            let after = await probes.emulator()
            let requests = delta(after, before, "update_requests")
            let delivered = delta(after, before, "distinct_fixes_received")
            let received = delta(after, before, "locations_received")
            guard run.status == 0 else {
                throw BenchError("the replay exited \(run.status) (see \(environment.workDirectory)/replay-\(bound).log)")
            }
            let name = "--max-pending-records \(bound)"
            report.add(section, "\(name): \(backlog.events) fixes of \(vehicles) vehicles replayed in", run.seconds, "s")
            report.add(section, "\(name): fixes/s", Double(backlog.events) / run.seconds, "fixes/s")
            report.add(section, "\(name): fixes per update request", delivered / max(requests, 1), "fixes/request",
                       ratio: delivered / max(requests, 1) / 101, of: "a full request (101)")
            report.add(section, "\(name): relay CPU per fix", run.cpu / Double(backlog.events) * 1e6, "µs")
            report.add(section, "\(name): peak RSS", run.peakRSS, "MB")
            report.add(section, "\(name): fixes lost", Double(backlog.events) - delivered, "fixes")
            report.add(section, "\(name): fixes received twice", received - delivered, "fixes")
            peaks.append((bound, run.peakRSS))
        }
        guard let low = peaks.first, let high = peaks.last, high.bound > low.bound else { return }
        let perRecord = (high.peak - low.peak) * 1_048_576 / Double(high.bound - low.bound)
        report.add(section, "memory per pending record (peak RSS difference / bound difference)", perRecord, "bytes")
    }

    struct ReplayRun {
        let status: Int32
        let seconds: Double
        let cpu: Double
        let peakRSS: Double
    }

    /// Runs the replay as its own process until it exits, sampling its peak RSS while it runs
    /// (the kernel forgets it at exit).
    private func replayProcess(topic: String, pendingBound: Int) async throws -> ReplayRun {
        let endpoint = environment.emulator(transport)
        let arguments = [
            "replay", "--brokers", environment.cluster.bootstrapServers, "--topic", topic, "--from", "-1d", "--to-end",
            "--rate", "0", "--key-file", environment.keyFile, "--fleet-engine-url", endpoint.url,
            "--max-pending-records", String(pendingBound), "--progress", "log", "--log-level", "warning",
        ] + environment.transportArguments(transport)
        let started = ContinuousClock.now
        let process = try ChildProcess(name: "replay", executable: environment.relayBinary, arguments: arguments,
                                       logPath: "\(environment.workDirectory)/replay-\(pendingBound).log")
        var figures = (cpu: 0.0, peak: 0.0)
        async let status = process.waitForExit()
        while process.process.isRunning {
            let (cpu, peak) = (process.cpuSeconds, process.peakRSSMegabytes)
            if peak > 0 { figures = (cpu, peak) }
            try await Task.sleep(for: .milliseconds(100))
        }
        let exit = await status
        return ReplayRun(status: exit, seconds: (ContinuousClock.now - started).seconds, cpu: figures.cpu, peakRSS: figures.peak)
    }
}
