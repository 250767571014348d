import FleetAuth
import FleetEngineEmulator
import Foundation
import JSON
import Testing

/// The binary started the way the Kubernetes manifests start it: the container's arguments and
/// its environment as rendered from deploy/k8s (ConfigMap values and env), with only the
/// endpoints swapped for this machine's (mock cluster, emulator, key path, a free port). Run by
/// `make test` with the debug binary, and by `make lint-deploy` with the binary built by the
/// Dockerfile's own build script (FLEET_RELAY_SMOKE_BINARY).
extension IntegrationTests {
@Suite struct DeploymentSmokeTests {
    struct Rendered {
        let arguments: [String]
        let environment: [String: String]
    }

    /// The relay container of a kustomization, rendered by deploy/check-manifests.py.
    static func render(_ kustomization: String) async throws -> Rendered {
        let python = ProcessInfo.processInfo.environment["FLEET_RELAY_PYTHON"] ?? which("python3") ?? "/usr/bin/python3"
        let script = DeployArtifactsTests.root.appendingPathComponent("deploy/check-manifests.py").path
        let result = try await runTool(python, [script, "--print-env", kustomization], input: "")
        #expect(result.status == 0, "check-manifests.py (needs PyYAML): \(result.output)")
        let json = try JSONParser.parse(result.output)
        let arguments = try #require(json["args"]?.arrayValue).compactMap(\.stringValue)
        var environment: [String: String] = [:]
        for (name, value) in try #require(json["env"]?.objectValue) { environment[name] = value.stringValue }
        return Rendered(arguments: arguments, environment: environment)
    }

    static var binary: URL {
        ProcessInfo.processInfo.environment["FLEET_RELAY_SMOKE_BINARY"].map { URL(fileURLWithPath: $0) }
            ?? IntegrationTests.CommandLineTests.binary
    }

    @Test(arguments: ["k8s/base", "k8s/overlays/workload-identity", "k8s/overlays/keda-lag"])
    func theManifestsConfigurationRunsTheRelay(_ kustomization: String) async throws {
        let rendered = try await Self.render(kustomization)
        #expect(rendered.arguments == ["run"])
        let harness = try await RelayHarness(partitions: 4)
        defer { Task { await harness.shutdown() } }
        let generated = GeneratedEvents(vehicles: 20, fixesPerVehicle: 3)
        try await harness.produce(generated.events.map(\.record))

        let metricsPort = try freeLoopbackPort()
        var environment = rendered.environment
        // This machine's endpoints; everything else exactly as the manifests set it.
        environment["FLEET_RELAY_BROKERS"] = harness.cluster.bootstrapServers
        environment["FLEET_RELAY_TOPIC"] = harness.topic
        environment["FLEET_RELAY_PROVIDER"] = harness.key.projectId
        environment["FLEET_RELAY_FLEET_ENGINE_URL"] = harness.emulatorURL
        environment["FLEET_RELAY_CA_FILE"] = harness.caFile
        environment["FLEET_RELAY_METRICS_PORT"] = "\(metricsPort)"
        var peers: IntegrationTests.SignerEndToEndTests.Peers?
        if environment["FLEET_RELAY_KEY_FILE"] != nil {
            environment["FLEET_RELAY_KEY_FILE"] = harness.writeKeyFile()
        } else {
            #expect(environment["FLEET_RELAY_SIGNER"] == "iam")
            let google = try await IntegrationTests.SignerEndToEndTests.Peers(harness: harness)
            peers = google
            environment["FLEET_RELAY_IAM_URL"] = google.server.baseURL
            environment["FLEET_RELAY_SERVICE_ACCOUNT"] = harness.key.clientEmail
            environment["GCE_METADATA_HOST"] = google.hostAndPort
        }
        let process = Process()
        process.executableURL = Self.binary
        process.arguments = rendered.arguments
        process.environment = ProcessInfo.processInfo.environment.filter { !$0.key.hasPrefix("FLEET_RELAY_") }
            .merging(environment) { _, new in new }
        let stderr = Pipe()
        process.standardError = stderr
        process.standardOutput = Pipe()
        try process.run()

        try await eventually("the relay is ready") {
            (try? await httpGet("http://127.0.0.1:\(metricsPort)/readyz"))?.status == 200
        }
        try await harness.waitUntilEverythingIsDelivered(generated, group: environment["FLEET_RELAY_GROUP"]!)
        process.terminate()
        let (status, log) = await Self.waitForExit(process, stderr)
        #expect(status == 0, "\(log.suffix(2000))")
        #expect(!log.contains("ignoring FLEET_RELAY_"), "every variable the manifests set is a flag of run: \(log)")
        let lines = log.split(separator: "\n")
        #expect(!lines.isEmpty && lines.allSatisfy { $0.hasPrefix("{") }, "FLEET_RELAY_LOG_FORMAT=json: \(lines.first ?? "")")
        withExtendedLifetime(peers) {}
    }

    static func waitForExit(_ process: Process, _ stderr: Pipe) async -> (Int32, String) {
        await withCheckedContinuation { continuation in
            Thread {
                let data = stderr.fileHandleForReading.readDataToEndOfFile()
                process.waitUntilExit()
                continuation.resume(returning: (process.terminationStatus, String(decoding: data, as: UTF8.self)))
            }.start()
        }
    }
}
}
