import FleetEngineEmulator
import Foundation
import Kafka
import Testing

/// Secrets given to the relay by mistake or by design never reach its errors, logs or
/// metrics: each case carries a sentinel that is looked for in everything it printed.
@Suite struct SecretsInErrorsTests {
    func run(_ arguments: [String]) async throws -> IntegrationTests.CommandLineTests.Finished {
        try await IntegrationTests.CommandLineTests().run(arguments)
    }

    @Test func aKafkaPropertyWithoutEqualsSignIsNotEchoed() async throws {
        let sentinel = "sentinel-kafka-secret-51c2"
        let result = try await run(["run", "--brokers", "b", "--topic", "t", "--key-file", "k",
                                    "--kafka-property", "sasl.password:\(sentinel)"])
        #expect(result.status == 78)
        #expect(result.stderr.split(separator: "\n").count == 1)
        #expect(result.stderr.contains("a --kafka-property is not of the form key=value"), "\(result.stderr)")
        #expect(!(result.stderr + result.stdout).contains(sentinel))
    }

    @Test func secretKafkaPropertiesAreMaskedInTheStartupLine() {
        let configuration = KafkaConfiguration([
            "sasl.oauthbearer.config": "principal=sentinel-oauth-9f1", "sasl.password": "p", "ssl.key.password": "q",
            "security.protocol": "SASL_SSL",
        ])
        #expect(configuration.redacted == ["sasl.oauthbearer.config": "****", "sasl.password": "****", "ssl.key.password": "****",
                                           "security.protocol": "SASL_SSL"])
    }

    @Test func aTokenServiceURLsCredentialsAreNotLogged() async throws {
        let sentinel = "sentinel-url-password-0d7e"
        let metricsPort = try freeLoopbackPort()
        let relay = try IntegrationTests.CommandLineTests.RunningProcess([
            "run", "--brokers", "127.0.0.1:1", "--topic", "t", "--signer", "token-service",
            "--token-url", "http://relay:\(sentinel)@127.0.0.1:1/token?key=\(sentinel)", "--provider", "p",  // loopback: plain http allowed
            "--log-level", "info", "--metrics-port", String(metricsPort), "--metrics-host", "127.0.0.1",
        ])
        var metrics = ""
        try await eventually("the ops endpoint answers") {
            metrics = (try? await httpGet("http://127.0.0.1:\(metricsPort)/metrics").body) ?? ""
            return !metrics.isEmpty
        }
        relay.process.terminate()
        let result = await relay.finish()
        #expect(result.stderr.contains("http://<credentials>@127.0.0.1:1/token"), "\(result.stderr.prefix(3000))")
        #expect(!(result.stderr + result.stdout + metrics).contains(sentinel))
    }
}

extension SecretsInErrorsTests {
    static let registryPassword = "sentinel-registry-password-a41f"
    static let proxyPassword = "sentinel-proxy-password-e07c"

    /// Runs `fleet-relay run` with the harness's topic and `extra` flags at debug level until
    /// `reached` holds for a line of its log other than the startup line (which names every
    /// setting, secrets masked), then stops it; returns everything it printed and served.
    func printedUntil(_ harness: RelayHarness, _ extra: [String], _ what: String, reached: @escaping (Substring) -> Bool)
        async throws -> String {
        let metricsPort = try freeLoopbackPort()
        let relay = try IntegrationTests.CommandLineTests.RunningProcess([
            "run", "--brokers", harness.cluster.bootstrapServers, "--topic", harness.topic, "--group", "secrets",
            "--key-file", harness.writeKeyFile(), "--ca-file", harness.caFile, "--fleet-engine-url", harness.emulatorURL,
            "--metrics-port", String(metricsPort), "--log-level", "debug", "--log-format", "json", "--ready-max-outage", "1s",
        ] + extra, environment: ["HTTPS_PROXY": "http://relay:\(Self.proxyPassword)@127.0.0.1:9", "NO_PROXY": "127.0.0.1"])
        relay.watchLog()
        var metrics = "", readiness = ""
        do {
            try await eventually(what, timeout: .seconds(90)) {
                guard let answer = try? await httpGet("http://127.0.0.1:\(metricsPort)/metrics") else { return false }
                metrics = answer.body
                readiness = (try? await httpGet("http://127.0.0.1:\(metricsPort)/readyz").body) ?? ""
                return relay.log.split(separator: "\n").contains { !$0.contains("kafka_properties") && reached($0) }
            }
        } catch {
            Issue.record("\(error); log: \(relay.log.suffix(4000))")
        }
        relay.process.terminate()
        let result = await relay.finish()
        return [relay.log, result.stderr, result.stdout, metrics, readiness].joined(separator: "\n")
    }

    /// A SASL password and proxy credentials, each a sentinel, at debug level: the relay
    /// reaches Kafka's error path (the mock cluster speaks no SASL), and no log line, error,
    /// metric or readiness answer holds either sentinel.
    @Test func sentinelSecretsAppearNowhereOnKafkasErrorPath() async throws {
        let sasl = "sentinel-sasl-password-3b9d"
        let harness = try await RelayHarness(partitions: 1)
        let everything = try await printedUntil(harness, [
            "--kafka-property", "security.protocol=SASL_PLAINTEXT", "--kafka-property", "sasl.mechanism=PLAIN",
            "--kafka-property", "sasl.username=relay", "--kafka-property", "sasl.password=\(sasl)",
        ], "Kafka's error for the SASL handshake is logged") { line in
            (line.contains("\"error\"") || line.contains("\"warning\"") || line.contains("\"critical\""))
                && (line.contains("SASL") || line.contains("Kafka"))
        }
        #expect(everything.contains("sasl.password"), "the startup line names the property")
        for sentinel in [sasl, Self.proxyPassword] {
            #expect(!everything.contains(sentinel), "\(sentinel) leaked")
        }
        await harness.shutdown()
    }

    /// Schema Registry credentials and proxy credentials, each a sentinel, at debug level: the
    /// registry refuses them (it wants others), so the relay logs the registry's refusal and
    /// `/readyz` names it; no log line, error, metric or readiness answer holds either sentinel.
    @Test func sentinelSecretsAppearNowhereOnTheRegistrysErrorPath() async throws {
        let harness = try await RelayHarness(partitions: 1)
        let registry = SchemaRegistryEmulator(requiredCredentials: "relay:another-password")
        let registryServer = try await EmulatorHost.start([registry])
        try await harness.produce([(nil, [0, 0, 0, 0, 5, 2, 4, 6])])  // framed for schema 5
        let everything = try await printedUntil(harness, [
            "--schema-registry", registryServer.baseURL, "--schema-registry-credentials", "relay:\(Self.registryPassword)",
        ], "the registry's refusal is logged") { line in
            line.contains("answered HTTP 401")
        }
        #expect(everything.contains("schema_registry"), "/readyz names the registry")
        for sentinel in [Self.registryPassword, Self.proxyPassword] {
            #expect(!everything.contains(sentinel), "\(sentinel) leaked")
        }
        await registryServer.shutdown()
        await harness.shutdown()
    }
}
