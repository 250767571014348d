import ArgumentParser
import Kafka

package struct KafkaOptions: ParsableArguments {
    package init() {}

    @Option(help: "Kafka bootstrap servers (host:port, comma-separated).")
    package var brokers: String

    @Option(name: .customLong("kafka-property"),
            help: ArgumentHelp("Any librdkafka property as key=value, e.g. security.protocol=SASL_SSL (repeatable).",
                               valueName: "key=value"))
    package var kafkaProperties: [String] = []

    package func configuration() throws -> KafkaConfiguration {
        var configuration = KafkaConfiguration(bootstrapServers: brokers)
        for property in kafkaProperties {
            do {
                let (key, value) = try KafkaConfiguration.parseProperty(property)
                configuration[key] = value
            } catch {
                throw StartupError(error.message)
            }
        }
        return configuration
    }

    /// The configuration, checked by librdkafka itself: a typo stops startup in librdkafka's words.
    package func validatedConfiguration() throws -> KafkaConfiguration {
        let configuration = try configuration()
        do {
            try configuration.validate()
        } catch {
            throw StartupError(error.message)
        }
        return configuration
    }
}
