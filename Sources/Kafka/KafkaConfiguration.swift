import Foundation

/// librdkafka properties, passed through as the user wrote them
/// (https://github.com/confluentinc/librdkafka/blob/master/CONFIGURATION.md),
/// so SASL, SSL and tuning work exactly as they do in any other librdkafka client.
public struct KafkaConfiguration: Sendable {
    public var properties: [String: String]

    public init(_ properties: [String: String] = [:]) {
        self.properties = properties
    }

    public init(bootstrapServers: String, extra: [String: String] = [:]) {
        self.properties = extra
        self.properties["bootstrap.servers"] = bootstrapServers
    }

    public subscript(key: String) -> String? {
        get { properties[key] }
        set { properties[key] = newValue }
    }

    /// Parses `key=value` (as given to `--kafka-property`).
    public static func parseProperty(_ text: String) throws(KafkaError) -> (String, String) {
        guard let equals = text.firstIndex(of: "="), equals != text.startIndex else {
            // Not echoed: `sasl.password:…` is a secret with a typo.
            throw KafkaError(.configuration, "a --kafka-property is not of the form key=value (its \(text.count) characters are not shown: they may hold a secret)")
        }
        let key = String(text[..<equals]).trimmingCharacters(in: .whitespaces)
        let value = String(text[text.index(after: equals)...])
        return (key, value)
    }

    /// Properties whose values must never be logged.
    public static func isSecret(_ key: String) -> Bool {
        let lowered = key.lowercased()
        return ["password", "secret", "sasl.jaas.config", "sasl.oauthbearer.config", "ssl.key.pem", "token", "credentials"]
            .contains { lowered.contains($0) }
    }

    /// The properties with secret values masked, for the startup log line.
    public var redacted: [String: String] {
        properties.reduce(into: [:]) { result, entry in
            result[entry.key] = Self.isSecret(entry.key) ? "****" : entry.value
        }
    }
}

extension KafkaConfiguration {
    /// Checks every property with librdkafka itself, so a typo stops startup with
    /// librdkafka's own message instead of failing later inside a client.
    public func validate() throws(KafkaError) {
        try RDKafkaClient.validate(self)
    }
}
