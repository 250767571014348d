import ArgumentParser
import Foundation

struct FleetRelay: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "fleet-relay",
        abstract: "Relays vehicle locations from Kafka to Google Fleet Engine.",
        discussion: "Every flag can also be set with FLEET_RELAY_<FLAG_IN_UPPER_SNAKE>; the command line wins.",
        version: FleetRelayVersion.current,
        subcommands: [RunCommand.self, ReplayCommand.self, TokenCommand.self, MappingCommand.self, DemoCommand.self, EmulatorCommand.self, SimulateCommand.self]
    )
}

enum FleetRelayVersion {
    static let current = "0.1.0"
}

@main
enum FleetRelayMain {
    static func main() async {
        MallocTuning.apply(environment: ProcessInfo.processInfo.environment)
        let subcommands: [String: any ParsableCommand.Type] = [
            "run": RunCommand.self, "replay": ReplayCommand.self, "token": TokenCommand.self, "demo": DemoCommand.self, "emulator": EmulatorCommand.self, "simulate": SimulateCommand.self, "mapping": MappingCommand.self,
        ]
        let resolution = EnvironmentArguments.resolve(
            arguments: Array(CommandLine.arguments.dropFirst()), environment: ProcessInfo.processInfo.environment,
            subcommands: subcommands, root: FleetRelay.self)
        for warning in resolution.warnings { printError("fleet-relay: warning: \(warning)") }
        do {
            var command = try FleetRelay.parseAsRoot(resolution.arguments)
            if var asyncCommand = command as? any AsyncParsableCommand {
                try await asyncCommand.run()
            } else {
                try command.run()
            }
        } catch let code as ExitCode {
            exit(code.rawValue)  // the command has said why
        } catch let error as StartupError {
            printError("fleet-relay: error: \(error.description)")
            exit(78)  // EX_CONFIG
        } catch {
            let code = FleetRelay.exitCode(for: error)
            if code == .success {
                print(FleetRelay.fullMessage(for: error))
                exit(0)
            }
            let message = FleetRelay.message(for: error).split(separator: "\n").first.map(String.init) ?? "\(error)"
            let hint = resolution.arguments.first { !$0.hasPrefix("-") }.map { " (see 'fleet-relay \($0) --help')" } ?? " (see 'fleet-relay --help')"
            printError("fleet-relay: error: \(message)\(hint)")
            exit(code.rawValue)
        }
    }

    static func printError(_ line: String) {
        FileHandle.standardError.write(Data((line + "\n").utf8))
    }
}
