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
