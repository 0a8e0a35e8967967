// Package containermachine reconciles ContainerMachines: a thin controller
// that fetches the objects, handles finalizer and pause, builds a
// lifecycle.MachineScope and runs the phases of internal/lifecycle, then
// patches status from the pure setters. MachinePool machines run through the
// same controller; there is no second copy of the machine logic.
package containermachine
