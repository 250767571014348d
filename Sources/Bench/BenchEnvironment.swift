import FleetAuth
import FleetSimulator
import Foundation
import Kafka
import Logging

/// What every scenario shares: the mock cluster (in this process), the emulator
/// (its own process), a key, and how to start the relay as its own process.
struct BenchEnvironment {
    let relayBinary: String
    let relayArguments: [String]
    let workDirectory: String
    let cluster: KafkaMockCluster
    let kafka: KafkaConfiguration
    let keyFile: String
    let key: ServiceAccountKey
    let emulator: ChildProcess
    let emulatorURL: String
    let probes: Probes
    let logger: Logger

    static func start(relayBinary: String, emulatorBinary: String, relayArguments: [String], workDirectory: String,
                      logger: Logger) async throws -> BenchEnvironment {
        let cluster = try KafkaMockCluster(brokers: 1, logger: logger)
        let kafka = KafkaConfiguration(bootstrapServers: cluster.bootstrapServers)
        let keyFile = workDirectory + "/bench-sa.json"
        guard let json = ServiceAccountKey.generateKeyFileJSON(
            projectId: "bench-project", clientEmail: "relay@bench-project.iam.gserviceaccount.com", privateKeyId: "bench-kid"),
            FileManager.default.createFile(atPath: keyFile, contents: Data(json.utf8), attributes: [.posixPermissions: 0o600])
        else { throw BenchError("cannot write a key file in \(workDirectory)") }
        let key = try ServiceAccountKey.parse(Array(json.utf8), source: keyFile)
        let port = 18_000 + Int.random(in: 0..<2000)
        let emulator = try ChildProcess(
            name: "emulator", executable: emulatorBinary,
            arguments: ["emulator", "--key-file", keyFile, "--port", String(port), "--record-history", "--log-level", "warning"],
            logPath: workDirectory + "/emulator.log")
        let emulatorURL = "http://127.0.0.1:\(port)"
        let probes = Probes(emulatorURL: emulatorURL, kafka: kafka, logger: logger)
        guard await waitUntil(timeout: .seconds(30), { await probes.get(emulatorURL + "/_emulator/statistics") != nil }) else {
            throw BenchError("the emulator did not start (see \(workDirectory)/emulator.log)")
        }
        return BenchEnvironment(relayBinary: relayBinary, relayArguments: relayArguments, workDirectory: workDirectory, cluster: cluster, kafka: kafka,
                                keyFile: keyFile, key: key, emulator: emulator, emulatorURL: emulatorURL, probes: probes,
                                logger: logger)
    }

    /// Starts `fleet-relay run` on `topic` and waits until its consumer joined the group.
    func startRelay(topic: String, group: String) async throws -> (relay: ChildProcess, metricsPort: Int, startup: Duration) {
        let metricsPort = 20_000 + Int.random(in: 0..<5000)
        let started = ContinuousClock.now
        let relay = try ChildProcess(name: "relay", executable: relayBinary, arguments: [
            "run", "--brokers", cluster.bootstrapServers, "--topic", topic, "--group", group, "--key-file", keyFile,
            "--fleet-engine-url", emulatorURL, "--metrics-port", String(metricsPort), "--metrics-host", "127.0.0.1",
            "--log-level", "warning",
        ] + relayArguments, logPath: "\(workDirectory)/relay-\(group).log")
        guard await waitUntil(timeout: .seconds(60), { await probes.isReady(metricsPort: metricsPort) }) else {
            _ = await relay.stop()
            throw BenchError("the relay did not become ready (see \(workDirectory)/relay-\(group).log)")
        }
        return (relay, metricsPort, .now - started)
    }

    /// lz4-compressed batches: the mock cluster keeps about 5 MiB per partition, and
    /// compressed events stretch that over a longer stretch of the stream.
    var producerConfiguration: KafkaConfiguration {
        var configuration = kafka
        configuration["compression.type"] = "lz4"
        configuration["linger.ms"] = "20"
        return configuration
    }

    func createTopic(_ topic: String, partitions: Int) throws {
        try cluster.createTopic(topic, partitions: partitions)
        try cluster.createTopic(topic + ".dlq", partitions: 1)
    }

    func shutdown() async {
        _ = await emulator.stop()
    }
}

struct BenchError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

extension Duration {
    var seconds: Double { Double(components.seconds) + Double(components.attoseconds) / 1e18 }
}
