import ArgumentParser
import CommandLineSupport

/// The production binary: what a relay, a backfill or an operator checking its setup runs.
/// The emulator, the simulator and the demo live in `fleet-relay-dev`.
struct FleetRelay: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "fleet-relay",
        abstract: "Relays vehicle locations from Kafka to Google Fleet Engine.",
        discussion: "Every flag can also be set with FLEET_RELAY_<FLAG_IN_UPPER_SNAKE>; the command line wins.",
        version: FleetRelayVersion.current,
        subcommands: [RunCommand.self, ReplayCommand.self, TokenCommand.self, MappingCommand.self]
    )
}

enum FleetRelayVersion {
    static let current = "0.1.0"
}

@main
enum FleetRelayMain {
    static func main() async {
        await CommandLineMain.run(FleetRelay.self)
    }
}
